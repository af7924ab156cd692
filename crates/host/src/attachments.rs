//! Attachments: files the user adds to a turn, read with a size bound, typed by their magic bytes and turned
//! into AWP content blocks (PNG/JPEG/GIF/WebP → `image`, PDF → `document`, UTF-8 text → `text`).

use std::io::Read;
use std::path::{Path, PathBuf};

use agentwire_awp::ContentBlock;
use base64::Engine;

/// Limits on attachments.
#[derive(Clone, Debug)]
pub struct AttachmentLimits {
    /// Maximum size of one attachment file in bytes. Default 10 MiB (10 485 760). A larger file is rejected with
    /// [`AttachmentError::TooLarge`] before anything is sent; its bytes past the limit are never read.
    pub max_attachment_bytes: u64,
    /// Maximum number of attachments per turn. Default 16. More is [`AttachmentError::TooMany`].
    pub max_attachments: usize,
}

impl Default for AttachmentLimits {
    fn default() -> Self {
        Self {
            max_attachment_bytes: 10 * 1024 * 1024,
            max_attachments: 16,
        }
    }
}

/// Why an attachment cannot be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum AttachmentError {
    /// The file could not be opened or read.
    #[error("cannot read attachment {path}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The IO failure.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`AttachmentLimits::max_attachment_bytes`].
    #[error("attachment {path} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// The content is neither a supported image, a PDF nor UTF-8 text.
    #[error(
        "attachment {path} has an unsupported type (supported: PNG, JPEG, GIF, WebP, PDF, UTF-8 text)"
    )]
    UnsupportedType {
        /// The file.
        path: PathBuf,
    },
    /// The path is not a regular file (a directory, a FIFO, a socket, a device): reading it could block or never
    /// end, so it is refused before it is read (a FIFO is opened without blocking, and never read).
    #[error("attachment {path} is not a regular file (it is {kind})")]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What it is: `a directory`, `a FIFO`, `a socket`, `a character device`, `a block device`.
        kind: &'static str,
    },
    /// More files than [`AttachmentLimits::max_attachments`].
    #[error("too many attachments ({count}, limit {limit})")]
    TooMany {
        /// Files given.
        count: usize,
        /// The limit.
        limit: usize,
    },
}

impl AttachmentError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            AttachmentError::Unreadable { .. } => "attachment_unreadable",
            AttachmentError::TooLarge { .. } => "attachment_too_large",
            AttachmentError::UnsupportedType { .. } => "attachment_unsupported_type",
            AttachmentError::TooMany { .. } => "too_many_attachments",
            AttachmentError::NotAFile { .. } => "attachment_not_a_file",
        }
    }
}

/// What the magic bytes say a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// An image with this MIME type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
    Image(&'static str),
    /// A document with this MIME type (`application/pdf`).
    Document(&'static str),
    /// UTF-8 text without NUL bytes.
    Text,
}

/// Types `bytes` by magic number; `None` for anything unsupported.
pub fn sniff(bytes: &[u8]) -> Option<Sniffed> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Sniffed::Image("image/png"))
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Sniffed::Image("image/jpeg"))
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(Sniffed::Image("image/gif"))
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
        Some(Sniffed::Image("image/webp"))
    } else if bytes.starts_with(b"%PDF-") {
        Some(Sniffed::Document("application/pdf"))
    } else if !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok() {
        Some(Sniffed::Text)
    } else {
        None
    }
}

/// What a file that is not a regular one is, for [`AttachmentError::NotAFile`]; `None` for a regular file.
fn file_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt as _;
    if file_type.is_file() {
        None
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else {
        Some("not a regular file")
    }
}

/// One attachment ready to send.
#[derive(Clone, Debug)]
pub struct Attachment {
    /// The file name (last path component, controls escaped as with
    /// [`escape_controls`](crate::store::escape_controls)), for display and for the stored user message.
    pub name: String,
    /// The MIME type (`text/plain` for text).
    pub media_type: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// The content block sent to the agent.
    pub block: ContentBlock,
}

impl Attachment {
    /// One-line description for the stored user message: `[attachment: shot.png (image/png, 1234 bytes)]`.
    pub fn describe(&self) -> String {
        format!(
            "[attachment: {} ({}, {} bytes)]",
            self.name, self.media_type, self.size
        )
    }
}

/// Reads `path` (at most `limits.max_attachment_bytes` bytes; one byte more proves it too large), types it and
/// builds its block. Text becomes a `text` block headed `Attachment <name>:`.
///
/// Only a regular file (a symbolic link is followed) is read: its type is checked with `stat` before it is
/// opened, and again on the open file (opened with `O_NONBLOCK`, so a path swapped for a FIFO in between cannot
/// block the open).
///
/// # Errors
/// [`AttachmentError::Unreadable`], [`AttachmentError::NotAFile`], [`AttachmentError::TooLarge`],
/// [`AttachmentError::UnsupportedType`].
pub fn read_attachment(
    path: &Path,
    limits: &AttachmentLimits,
) -> Result<Attachment, AttachmentError> {
    let unreadable = |source| AttachmentError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let regular = |meta: &std::fs::Metadata| match file_kind(meta.file_type()) {
        None => Ok(()),
        Some(kind) => Err(AttachmentError::NotAFile {
            path: path.to_path_buf(),
            kind,
        }),
    };
    regular(&std::fs::metadata(path).map_err(unreadable)?)?;
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| unreadable(e.into()))?;
    let file = std::fs::File::from(fd);
    regular(&file.metadata().map_err(unreadable)?)?;
    let mut bytes = Vec::new();
    file.take(limits.max_attachment_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let size = bytes.len() as u64;
    if size > limits.max_attachment_bytes {
        return Err(AttachmentError::TooLarge {
            path: path.to_path_buf(),
            limit: limits.max_attachment_bytes,
        });
    }
    // Escaped so that a name with a newline (or other control) cannot forge an `Attachment <name>:` header or
    // the stored description line.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let name = crate::store::escape_controls(&name, true).into_owned();
    let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let (media_type, block) = match sniff(&bytes) {
        Some(Sniffed::Image(media_type)) => (
            media_type,
            ContentBlock::Image {
                media_type: media_type.to_owned(),
                data_base64: encode(&bytes),
            },
        ),
        Some(Sniffed::Document(media_type)) => (
            media_type,
            ContentBlock::Document {
                media_type: media_type.to_owned(),
                data_base64: encode(&bytes),
            },
        ),
        Some(Sniffed::Text) => {
            let text = String::from_utf8(bytes).map_err(|_| AttachmentError::UnsupportedType {
                path: path.to_path_buf(),
            })?;
            (
                "text/plain",
                ContentBlock::text(format!("Attachment {name}:\n{text}")),
            )
        }
        None => {
            return Err(AttachmentError::UnsupportedType {
                path: path.to_path_buf(),
            });
        }
    };
    Ok(Attachment {
        name,
        media_type,
        size,
        block,
    })
}

/// Reads every file of `paths` with [`read_attachment`], after checking their count.
///
/// # Errors
/// [`AttachmentError::TooMany`], or the first file's error.
pub fn read_attachments(
    paths: &[PathBuf],
    limits: &AttachmentLimits,
) -> Result<Vec<Attachment>, AttachmentError> {
    if paths.len() > limits.max_attachments {
        return Err(AttachmentError::TooMany {
            count: paths.len(),
            limit: limits.max_attachments,
        });
    }
    paths.iter().map(|p| read_attachment(p, limits)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: &[u8], expect: Option<Sniffed>) {
        assert_eq!(sniff(bytes), expect, "{bytes:?}");
    }

    #[test]
    fn magic_bytes_decide_the_type() {
        check(
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
            Some(Sniffed::Image("image/png")),
        );
        check(
            &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10],
            Some(Sniffed::Image("image/jpeg")),
        );
        check(b"GIF89a\x01\0", Some(Sniffed::Image("image/gif")));
        check(b"GIF87a", Some(Sniffed::Image("image/gif")));
        check(
            b"RIFF\x24\0\0\0WEBPVP8 ",
            Some(Sniffed::Image("image/webp")),
        );
        check(b"RIFF\x24\0\0\0WAVEfmt ", None);
        check(b"%PDF-1.7\n", Some(Sniffed::Document("application/pdf")));
        check("héllo\n".as_bytes(), Some(Sniffed::Text));
        check(b"", Some(Sniffed::Text));
        check(b"text\0with nul", None);
        check(&[0xC3, 0x28], None);
        check(b"\x7fELF\x02\x01\x01\0", None);
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn size_limit_holds_at_the_limit_and_one_past_it() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = AttachmentLimits {
            max_attachment_bytes: 16,
            ..AttachmentLimits::default()
        };
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.resize(16, 0);
        let at = read_attachment(&write(tmp.path(), "a.png", &png), &limits).unwrap();
        assert_eq!((at.media_type, at.size), ("image/png", 16));
        assert!(
            matches!(&at.block, ContentBlock::Image { media_type, .. } if media_type == "image/png")
        );
        png.push(0);
        let err = read_attachment(&write(tmp.path(), "b.png", &png), &limits).unwrap_err();
        assert_eq!(err.code(), "attachment_too_large");
    }

    #[test]
    fn only_regular_files_are_read_and_a_fifo_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = AttachmentLimits::default();
        // A FIFO with no writer: opening it for reading would block forever, reading it would wait for a writer.
        let fifo = tmp.path().join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let socket = tmp.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for (path, kind) in [
            (fifo.clone(), "a FIFO"),
            (socket, "a socket"),
            (PathBuf::from("/dev/null"), "a character device"),
            (tmp.path().to_path_buf(), "a directory"),
        ] {
            let err = read_attachment(&path, &limits).unwrap_err();
            assert_eq!(err.code(), "attachment_not_a_file", "{path:?}");
            assert!(
                matches!(&err, AttachmentError::NotAFile { kind: k, .. } if *k == kind),
                "{path:?}: {err}"
            );
        }
        // A link to a regular file is followed; a link to the FIFO is refused like the FIFO.
        let file = write(tmp.path(), "f.txt", b"ok");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_attachment(&link, &limits).unwrap().size, 2);
        let fifo_link = tmp.path().join("fifo-link");
        std::os::unix::fs::symlink(&fifo, &fifo_link).unwrap();
        assert_eq!(
            read_attachment(&fifo_link, &limits).unwrap_err().code(),
            "attachment_not_a_file"
        );
    }

    #[test]
    fn blocks_by_type_and_typed_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = AttachmentLimits::default();
        let pdf =
            read_attachment(&write(tmp.path(), "d.pdf", b"%PDF-1.4\n%%EOF"), &limits).unwrap();
        assert!(
            matches!(&pdf.block, ContentBlock::Document { media_type, data_base64 }
            if media_type == "application/pdf" && data_base64 == "JVBERi0xLjQKJSVFT0Y=")
        );
        let txt = read_attachment(&write(tmp.path(), "n.txt", b"notes"), &limits).unwrap();
        assert_eq!(txt.block, ContentBlock::text("Attachment n.txt:\nnotes"));
        assert_eq!(txt.describe(), "[attachment: n.txt (text/plain, 5 bytes)]");
        let bin =
            read_attachment(&write(tmp.path(), "x.bin", b"\x7fELF\0\0"), &limits).unwrap_err();
        assert_eq!(bin.code(), "attachment_unsupported_type");
        let missing = read_attachment(&tmp.path().join("nope"), &limits).unwrap_err();
        assert_eq!(missing.code(), "attachment_unreadable");
        let few = AttachmentLimits {
            max_attachments: 1,
            ..AttachmentLimits::default()
        };
        let p = write(tmp.path(), "t.txt", b"t");
        assert_eq!(
            read_attachments(std::slice::from_ref(&p), &few)
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            read_attachments(&[p.clone(), p], &few).unwrap_err().code(),
            "too_many_attachments"
        );
    }
}
