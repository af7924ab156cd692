//! A minimal PNG encoder: 8-bit RGB, zlib stream of stored (uncompressed) deflate blocks.
//!
//! Source: PNG specification (ISO/IEC 15948, W3C PNG 3rd ed.) §5 (signature, chunk layout, CRC-32 over type and
//! data), §11.2.2 IHDR, §10 (zlib datastream, filter type 0 per scanline); RFC 1950 (zlib header, Adler-32) and
//! RFC 1951 §3.2.4 (stored blocks: `BFINAL`, `BTYPE=00`, `LEN`, `NLEN`).

/// CRC-32 (ISO 3309 / ITU-T V.42 polynomial `0xEDB88320`, reflected), as PNG chunks use it.
pub(crate) fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for part in parts {
        for &byte in *part {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
    }
    !crc
}

/// Adler-32 (RFC 1950 §8.2).
fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= 65_521;
        b %= 65_521;
    }
    (b << 16) | a
}

/// A zlib stream holding `data` in stored deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 65_535 * 5 + 16);
    out.extend_from_slice(&[0x78, 0x01]);
    let mut blocks = data.chunks(65_535).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[0x01, 0x00, 0x00, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let last = blocks.peek().is_none();
        let len = block.len() as u16;
        out.push(u8::from(last));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// A PNG of `width`×`height` RGB pixels; `pixel(x, y)` gives each pixel's `[r, g, b]`.
pub(crate) fn encode_rgb(width: u32, height: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    let mut raw = Vec::with_capacity((height as usize) * (1 + width as usize * 3));
    for y in 0..height {
        raw.push(0); // filter type 0 (None)
        for x in 0..width {
            raw.extend_from_slice(&pixel(x, y));
        }
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_their_published_check_values() {
        // The "check" values of the CRC catalogue and RFC 1950's Adler-32 for "123456789".
        assert_eq!(crc32(&[b"123456789"]), 0xcbf4_3926);
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xcbf4_3926);
        assert_eq!(adler32(b"123456789"), 0x091e_01de);
        assert_eq!(adler32(b""), 1);
    }

    #[test]
    fn stored_blocks_split_at_65535_bytes() {
        let data = vec![7u8; 65_536];
        let z = zlib_stored(&data);
        // header + two block headers + data + adler
        assert_eq!(z.len(), 2 + 5 + 5 + 65_536 + 4);
        assert_eq!(&z[2..7], &[0x00, 0xff, 0xff, 0x00, 0x00]);
        assert_eq!(z[7 + 65_535], 0x01);
    }
}
