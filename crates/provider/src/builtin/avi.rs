//! A minimal AVI writer: one uncompressed 24-bit RGB video stream (`DIB `), bottom-up rows, with an `idx1`
//! index.
//!
//! Source: Microsoft "AVI RIFF File Reference" (`AVIMAINHEADER`, `AVISTREAMHEADER`, `BITMAPINFOHEADER`,
//! `movi` list with `00db` chunks, `AVIOLDINDEX` with offsets from the `movi` fourcc).

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// An AVI of `frames` frames of `width`×`height` at `fps` frames per second; `pixel(frame, x, y)` gives each
/// pixel's `[r, g, b]` (`y` counted from the top).
pub(crate) fn encode_rgb(
    width: u32,
    height: u32,
    fps: u32,
    frames: u32,
    pixel: impl Fn(u32, u32, u32) -> [u8; 3],
) -> Vec<u8> {
    let stride = ((width * 3 + 3) & !3) as usize;
    let frame_size = stride * height as usize;
    let frame_size_u32 = frame_size as u32;

    let mut avih = Vec::with_capacity(56);
    put_u32(&mut avih, 1_000_000 / fps); // dwMicroSecPerFrame
    put_u32(&mut avih, frame_size_u32 * fps); // dwMaxBytesPerSec
    put_u32(&mut avih, 0); // dwPaddingGranularity
    put_u32(&mut avih, 0x10); // dwFlags: AVIF_HASINDEX
    put_u32(&mut avih, frames); // dwTotalFrames
    put_u32(&mut avih, 0); // dwInitialFrames
    put_u32(&mut avih, 1); // dwStreams
    put_u32(&mut avih, frame_size_u32); // dwSuggestedBufferSize
    put_u32(&mut avih, width);
    put_u32(&mut avih, height);
    avih.extend_from_slice(&[0; 16]); // dwReserved[4]

    let mut strh = Vec::with_capacity(56);
    strh.extend_from_slice(b"vidsDIB ");
    put_u32(&mut strh, 0); // dwFlags
    put_u16(&mut strh, 0); // wPriority
    put_u16(&mut strh, 0); // wLanguage
    put_u32(&mut strh, 0); // dwInitialFrames
    put_u32(&mut strh, 1); // dwScale
    put_u32(&mut strh, fps); // dwRate
    put_u32(&mut strh, 0); // dwStart
    put_u32(&mut strh, frames); // dwLength
    put_u32(&mut strh, frame_size_u32); // dwSuggestedBufferSize
    put_u32(&mut strh, u32::MAX); // dwQuality: default
    put_u32(&mut strh, 0); // dwSampleSize
    for value in [0u16, 0, width as u16, height as u16] {
        put_u16(&mut strh, value); // rcFrame
    }

    let mut strf = Vec::with_capacity(40);
    put_u32(&mut strf, 40); // biSize
    put_u32(&mut strf, width);
    put_u32(&mut strf, height); // positive: bottom-up
    put_u16(&mut strf, 1); // biPlanes
    put_u16(&mut strf, 24); // biBitCount
    put_u32(&mut strf, 0); // biCompression: BI_RGB
    put_u32(&mut strf, frame_size_u32); // biSizeImage
    strf.extend_from_slice(&[0; 16]); // resolution, colours used, colours important

    let chunk = |out: &mut Vec<u8>, id: &[u8; 4], body: &[u8]| {
        out.extend_from_slice(id);
        put_u32(out, body.len() as u32);
        out.extend_from_slice(body);
        if body.len() % 2 == 1 {
            out.push(0);
        }
    };
    let list = |out: &mut Vec<u8>, kind: &[u8; 4], body: &[u8]| {
        out.extend_from_slice(b"LIST");
        put_u32(out, (body.len() + 4) as u32);
        out.extend_from_slice(kind);
        out.extend_from_slice(body);
    };

    let mut strl = Vec::new();
    chunk(&mut strl, b"strh", &strh);
    chunk(&mut strl, b"strf", &strf);
    let mut hdrl = Vec::new();
    chunk(&mut hdrl, b"avih", &avih);
    list(&mut hdrl, b"strl", &strl);

    let mut movi = Vec::with_capacity((frame_size + 8) * frames as usize);
    let mut idx1 = Vec::with_capacity(16 * frames as usize);
    let mut data = vec![0u8; frame_size];
    for frame in 0..frames {
        for row in 0..height {
            let y = height - 1 - row; // bottom-up
            let line = &mut data[row as usize * stride..][..stride];
            for x in 0..width {
                let [r, g, b] = pixel(frame, x, y);
                line[x as usize * 3..][..3].copy_from_slice(&[b, g, r]);
            }
        }
        idx1.extend_from_slice(b"00db");
        put_u32(&mut idx1, 0x10); // AVIIF_KEYFRAME
        put_u32(&mut idx1, (movi.len() + 4) as u32); // from the `movi` fourcc
        put_u32(&mut idx1, frame_size_u32);
        chunk(&mut movi, b"00db", &data);
    }

    let mut body = b"AVI ".to_vec();
    list(&mut body, b"hdrl", &hdrl);
    list(&mut body, b"movi", &movi);
    chunk(&mut body, b"idx1", &idx1);
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(b"RIFF");
    put_u32(&mut out, body.len() as u32);
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_the_headers_add_up() {
        let avi = encode_rgb(3, 2, 8, 2, |f, x, y| [f as u8, x as u8, y as u8]);
        assert_eq!(&avi[0..4], b"RIFF");
        assert_eq!(
            u32::from_le_bytes([avi[4], avi[5], avi[6], avi[7]]) as usize,
            avi.len() - 8
        );
        assert_eq!(&avi[8..12], b"AVI ");
        // 3 px * 3 bytes = 9, padded to 12 per row; 2 rows; 2 frames.
        let movi = avi
            .windows(4)
            .position(|w| w == b"movi")
            .expect("movi list");
        assert_eq!(&avi[movi + 4..movi + 8], b"00db");
        assert_eq!(
            u32::from_le_bytes([avi[movi + 8], avi[movi + 9], avi[movi + 10], avi[movi + 11]]),
            24
        );
    }
}
