//! Images and PDFs with text in them, generated without fonts or image libraries, for OCR tests.
//!
//! [`render`] draws uppercase ASCII letters, digits and a few marks with a 5×7 bitmap font scaled up, black on
//! white, edges softened by a box blur, into an 8-bit grayscale [`Bitmap`]; [`png`] encodes one (stored deflate blocks, CRC-32 and Adler-32
//! computed here); [`pdf`] wraps bitmaps as one image XObject per page (uncompressed `DeviceGray`), so the PDF
//! needs no font and `pdftoppm` renders exactly the bitmap back at 150 dpi.

use std::fmt::Write as _;

/// An 8-bit grayscale image, row-major, 0 = black, 255 = white.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitmap {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `width * height` bytes.
    pub pixels: Vec<u8>,
}

/// The 5×7 glyph of `c` (one `u8` per row, the low five bits left to right), `None` for unsupported chars.
fn glyph(c: char) -> Option<[u8; 7]> {
    Some(match c {
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        ' ' => [0; 7],
        '.' => [0, 0, 0, 0, 0, 0x0C, 0x0C],
        '-' => [0, 0, 0, 0x1F, 0, 0, 0],
        _ => return None,
    })
}

/// Renders `lines` (uppercase ASCII letters, digits, space, `.` and `-`; anything else is drawn as a space)
/// at `scale` pixels per font dot, with a margin of four glyph widths.
pub fn render(lines: &[&str], scale: usize) -> Bitmap {
    let scale = scale.max(1);
    let cell_w = 6 * scale;
    let cell_h = 10 * scale;
    let margin = 4 * cell_w;
    let columns = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let width = 2 * margin + columns * cell_w;
    let height = 2 * margin + lines.len() * cell_h;
    let mut pixels = vec![255u8; width * height];
    for (row, line) in lines.iter().enumerate() {
        for (column, c) in line.chars().enumerate() {
            let Some(rows) = glyph(c.to_ascii_uppercase()) else {
                continue;
            };
            let x0 = margin + column * cell_w;
            let y0 = margin + row * cell_h;
            for (gy, bits) in rows.iter().enumerate() {
                for gx in 0..5 {
                    if bits & (0x10 >> gx) == 0 {
                        continue;
                    }
                    for dy in 0..scale {
                        let y = y0 + gy * scale + dy;
                        let start = y * width + x0 + gx * scale;
                        pixels[start..start + scale].fill(0);
                    }
                }
            }
        }
    }
    let bitmap = Bitmap {
        width,
        height,
        pixels,
    };
    soften(&bitmap, scale / 2)
}

/// A box blur of `radius` pixels: grey edges, as a scanned or antialiased glyph has (Tesseract reads them more
/// reliably than hard pixel steps).
fn soften(bitmap: &Bitmap, radius: usize) -> Bitmap {
    if radius == 0 {
        return bitmap.clone();
    }
    let (w, h) = (bitmap.width, bitmap.height);
    let mut out = vec![255u8; w * h];
    for y in 0..h {
        for x in 0..w {
            let (x0, x1) = (x.saturating_sub(radius), (x + radius).min(w - 1));
            let (y0, y1) = (y.saturating_sub(radius), (y + radius).min(h - 1));
            let mut sum = 0u32;
            for yy in y0..=y1 {
                for xx in x0..=x1 {
                    sum += u32::from(bitmap.pixels[yy * w + xx]);
                }
            }
            let count = ((x1 - x0 + 1) * (y1 - y0 + 1)) as u32;
            out[y * w + x] = u8::try_from(sum / count).unwrap_or(255);
        }
    }
    Bitmap {
        width: w,
        height: h,
        pixels: out,
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in bytes {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

/// A zlib stream of `data` in stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut chunks = data.chunks(65_535).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
    }
    while let Some(chunk) = chunks.next() {
        let last = u8::from(chunks.peek().is_none());
        let len = u16::try_from(chunk.len()).expect("chunk of at most 65535 bytes");
        out.push(last);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    let len = u32::try_from(data.len()).expect("chunk under 4 GiB");
    out.extend_from_slice(&len.to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// `bitmap` as an 8-bit grayscale PNG.
pub fn png(bitmap: &Bitmap) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&u32::try_from(bitmap.width).expect("width").to_be_bytes());
    header.extend_from_slice(&u32::try_from(bitmap.height).expect("height").to_be_bytes());
    header.extend_from_slice(&[8, 0, 0, 0, 0]);
    png_chunk(&mut out, b"IHDR", &header);
    let mut raw = Vec::with_capacity((bitmap.width + 1) * bitmap.height);
    for row in bitmap.pixels.chunks(bitmap.width.max(1)) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    png_chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    png_chunk(&mut out, b"IEND", &[]);
    out
}

/// A PDF with one page per bitmap, each page exactly the bitmap at 150 dpi, drawn as an uncompressed
/// `DeviceGray` image XObject (no fonts, no filters).
pub fn pdf(pages: &[Bitmap]) -> Vec<u8> {
    let mut out: Vec<u8> = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    let count = pages.len();
    // Objects: 1 catalog, 2 pages, then per page i: page 3+3i, contents 4+3i, image 5+3i.
    let object = |out: &mut Vec<u8>, offsets: &mut Vec<usize>, body: &[u8]| {
        offsets.push(out.len());
        let number = offsets.len();
        out.extend_from_slice(format!("{number} 0 obj\n").as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    };
    object(&mut out, &mut offsets, b"<< /Type /Catalog /Pages 2 0 R >>");
    let kids: String = (0..count).fold(String::new(), |mut kids, i| {
        let _ = write!(kids, "{} 0 R ", 3 + 3 * i);
        kids
    });
    object(
        &mut out,
        &mut offsets,
        format!("<< /Type /Pages /Kids [{kids}] /Count {count} >>").as_bytes(),
    );
    for (i, page) in pages.iter().enumerate() {
        let points = |pixels: usize| pixels as f64 * 72.0 / 150.0;
        let (w, h) = (points(page.width), points(page.height));
        object(
            &mut out,
            &mut offsets,
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w:.4} {h:.4}] /Contents {} 0 R \
                 /Resources << /XObject << /Im{i} {} 0 R >> >> >>",
                4 + 3 * i,
                5 + 3 * i
            )
            .as_bytes(),
        );
        let content = format!("q {w:.4} 0 0 {h:.4} 0 0 cm /Im{i} Do Q");
        object(
            &mut out,
            &mut offsets,
            format!(
                "<< /Length {} >>\nstream\n{content}\nendstream",
                content.len()
            )
            .as_bytes(),
        );
        let mut image = format!(
            "<< /Type /XObject /Subtype /Image /Width {} /Height {} /ColorSpace /DeviceGray \
             /BitsPerComponent 8 /Length {} >>\nstream\n",
            page.width,
            page.height,
            page.pixels.len()
        )
        .into_bytes();
        image.extend_from_slice(&page.pixels);
        image.extend_from_slice(b"\nendstream");
        object(&mut out, &mut offsets, &image);
    }
    let xref = out.len();
    let mut table = format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1);
    for offset in &offsets {
        let _ = writeln!(table, "{offset:010} 00000 n ");
    }
    let _ = write!(
        table,
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        offsets.len() + 1
    );
    out.extend_from_slice(table.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_has_a_valid_signature_header_and_checksums() {
        let image = render(&["HI"], 2);
        let bytes = png(&image);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&bytes[12..16], b"IHDR");
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert!(bytes.ends_with(&[0xAE, 0x42, 0x60, 0x82]));
    }

    #[test]
    fn pdf_pages_and_xref_are_consistent() {
        let page = render(&["A"], 1);
        let bytes = pdf(&[page.clone(), page]);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("/Count 2"));
        assert!(text.ends_with("%%EOF\n"));
    }
}
