//! [`RootedFs`]: the provided [`FsHandler`], confined to one directory tree.
//!
//! Source: ACP v1 "File System" (`fs/read_text_file {sessionId, path, line?, limit?}` → `{content}`,
//! `fs/write_text_file {sessionId, path, content}` → `{}`); paths are absolute, `line` is 1-based.
//! The path checks and line selection are pure functions; the tokio shell is [`RootedFs`]'s methods.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use agent_client_protocol_schema::v1::{
    ReadTextFileRequest, ReadTextFileResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use agentwire_jsonrpc::{ErrorCode, ErrorObject};

use crate::handlers::FsHandler;

/// ACP's "resource not found" error code (schema `$defs/ErrorCode`).
pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(-32002);

/// Size limits of [`RootedFs`].
#[derive(Clone, Debug)]
pub struct FsLimits {
    /// Largest file `fs/read_text_file` reads, in bytes. Default 32 MiB.
    /// A larger file is refused with [`FsError::TooLarge`] (never truncated), even when `line`/`limit` select part
    /// of it.
    pub max_read_bytes: u64,
    /// Largest `content` `fs/write_text_file` writes, in bytes. Default 32 MiB. Larger is refused with
    /// [`FsError::TooLarge`]; nothing is written.
    pub max_write_bytes: u64,
}

impl Default for FsLimits {
    fn default() -> Self {
        FsLimits {
            max_read_bytes: 32 * 1024 * 1024,
            max_write_bytes: 32 * 1024 * 1024,
        }
    }
}

/// Why a file request was refused.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FsError {
    /// The path is not absolute (ACP requires absolute paths).
    #[error("path is not absolute")]
    NotAbsolute,
    /// The path (after resolving `..` and symlinks) is outside the root.
    #[error("path is outside the allowed root")]
    OutsideRoot,
    /// The file (or, for a write, its directory) does not exist.
    #[error("file not found")]
    NotFound,
    /// The path names a directory or another non-file.
    #[error("path is not a regular file")]
    NotAFile,
    /// The file or content is over the limit.
    #[error("{bytes} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// The size, in bytes.
        bytes: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// `line` is 0 (lines are 1-based).
    #[error("line numbers start at 1")]
    InvalidLine,
    /// The file is not UTF-8 text.
    #[error("file is not UTF-8 text")]
    NotUtf8,
    /// Another IO error (the OS message).
    #[error("io error: {0}")]
    Io(String),
}

impl FsError {
    /// A stable snake_case code: `not_absolute`, `outside_root`, `not_found`, `not_a_file`, `too_large`,
    /// `invalid_line`, `not_utf8` or `io_error`.
    pub fn code(&self) -> &'static str {
        match self {
            FsError::NotAbsolute => "not_absolute",
            FsError::OutsideRoot => "outside_root",
            FsError::NotFound => "not_found",
            FsError::NotAFile => "not_a_file",
            FsError::TooLarge { .. } => "too_large",
            FsError::InvalidLine => "invalid_line",
            FsError::NotUtf8 => "not_utf8",
            FsError::Io(_) => "io_error",
        }
    }

    /// The JSON-RPC error sent to the agent: -32002 for [`FsError::NotFound`], -32603 for [`FsError::Io`],
    /// -32602 otherwise; `data` is `{"reason": code}`.
    pub fn to_error_object(&self) -> ErrorObject {
        let code = match self {
            FsError::NotFound => RESOURCE_NOT_FOUND,
            FsError::Io(_) => ErrorCode::INTERNAL_ERROR,
            _ => ErrorCode::INVALID_PARAMS,
        };
        ErrorObject::new(code, self.to_string())
            .with_data(serde_json::json!({"reason": self.code()}))
    }

    fn from_io(error: &std::io::Error) -> FsError {
        match error.kind() {
            std::io::ErrorKind::NotFound => FsError::NotFound,
            _ => FsError::Io(error.to_string()),
        }
    }
}

/// The part of `text` that starts at 1-based `line` and spans at most `limit` lines (line terminators kept).
/// A `line` past the end selects nothing.
///
/// # Errors
///
/// [`FsError::InvalidLine`] when `line` is 0.
pub fn select_lines(text: &str, line: Option<u32>, limit: Option<u32>) -> Result<&str, FsError> {
    let first = match line {
        Some(0) => return Err(FsError::InvalidLine),
        Some(line) => line as usize,
        None => 1,
    };
    // Byte offsets where each line starts: 0, then after every '\n'.
    let mut starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1));
    let Some(start) = starts
        .nth(first - 1)
        .filter(|&start| start < text.len() || first == 1)
    else {
        return Ok("");
    };
    let end = match limit {
        Some(0) => start,
        Some(limit) => starts.nth(limit as usize - 1).unwrap_or(text.len()),
        None => text.len(),
    };
    Ok(text.get(start..end.max(start)).unwrap_or_default())
}

/// Whether `canonical` (already canonicalized) lies inside `root` (canonical).
pub fn is_confined(root: &Path, canonical: &Path) -> bool {
    canonical.starts_with(root)
}

/// A file handler confined to one directory: every path is canonicalized (`..` and symlinks resolved) and must stay
/// under the root; a symlink pointing out of the root is refused, for reads and writes. Writes are atomic (a
/// temporary file in the same directory, then a rename), so the agent never leaves a half-written file.
#[derive(Debug)]
pub struct RootedFs {
    root: PathBuf,
    limits: FsLimits,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl RootedFs {
    /// Confines requests to `root`, canonicalized now.
    ///
    /// # Errors
    ///
    /// The IO error when `root` cannot be canonicalized (does not exist).
    pub fn new(root: impl AsRef<Path>) -> std::io::Result<RootedFs> {
        Ok(RootedFs {
            root: std::fs::canonicalize(root)?,
            limits: FsLimits::default(),
        })
    }

    /// Replaces the size limits.
    pub fn with_limits(mut self, limits: FsLimits) -> RootedFs {
        self.limits = limits;
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads `path` (absolute, inside the root), selecting lines as [`select_lines`].
    ///
    /// # Errors
    ///
    /// See [`FsError`].
    pub async fn read(
        &self,
        path: &Path,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> Result<String, FsError> {
        if !path.is_absolute() {
            return Err(FsError::NotAbsolute);
        }
        let canonical = tokio::fs::canonicalize(path)
            .await
            .map_err(|e| FsError::from_io(&e))?;
        if !is_confined(&self.root, &canonical) {
            return Err(FsError::OutsideRoot);
        }
        let metadata = tokio::fs::metadata(&canonical)
            .await
            .map_err(|e| FsError::from_io(&e))?;
        if !metadata.is_file() {
            return Err(FsError::NotAFile);
        }
        if metadata.len() > self.limits.max_read_bytes {
            return Err(FsError::TooLarge {
                bytes: metadata.len(),
                limit: self.limits.max_read_bytes,
            });
        }
        let bytes = tokio::fs::read(&canonical)
            .await
            .map_err(|e| FsError::from_io(&e))?;
        // The file may have grown between the metadata and the read.
        if bytes.len() as u64 > self.limits.max_read_bytes {
            return Err(FsError::TooLarge {
                bytes: bytes.len() as u64,
                limit: self.limits.max_read_bytes,
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| FsError::NotUtf8)?;
        Ok(select_lines(&text, line, limit)?.to_owned())
    }

    /// Writes `content` to `path` (absolute; its directory must exist inside the root), atomically.
    ///
    /// # Errors
    ///
    /// See [`FsError`].
    pub async fn write(&self, path: &Path, content: &str) -> Result<(), FsError> {
        if !path.is_absolute() {
            return Err(FsError::NotAbsolute);
        }
        if content.len() as u64 > self.limits.max_write_bytes {
            return Err(FsError::TooLarge {
                bytes: content.len() as u64,
                limit: self.limits.max_write_bytes,
            });
        }
        let (Some(parent), Some(Component::Normal(name))) =
            (path.parent(), path.components().next_back())
        else {
            return Err(FsError::NotAFile);
        };
        let parent = tokio::fs::canonicalize(parent)
            .await
            .map_err(|e| FsError::from_io(&e))?;
        if !is_confined(&self.root, &parent) {
            return Err(FsError::OutsideRoot);
        }
        let mut target = parent.join(name);
        match tokio::fs::symlink_metadata(&target).await {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                let resolved = tokio::fs::canonicalize(&target)
                    .await
                    .map_err(|e| FsError::from_io(&e))?;
                if !is_confined(&self.root, &resolved) {
                    return Err(FsError::OutsideRoot);
                }
                target = resolved;
            }
            Ok(metadata) if !metadata.is_file() => return Err(FsError::NotAFile),
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(FsError::from_io(&error)),
        }
        let directory = target.parent().unwrap_or(&parent).to_path_buf();
        let temp = directory.join(format!(
            ".{}.agentwire-{}-{}.tmp",
            name.to_string_lossy(),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = write_new(&temp, content.as_bytes()).await;
        let renamed = match written {
            Ok(()) => tokio::fs::rename(&temp, &target).await,
            Err(error) => Err(error),
        };
        if let Err(error) = renamed {
            // Best effort: the temporary file may not exist; the original error is what matters.
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(FsError::from_io(&error));
        }
        Ok(())
    }
}

async fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .await?;
    file.write_all(bytes).await?;
    file.sync_all().await
}

impl FsHandler for RootedFs {
    async fn read_text_file(
        &self,
        request: ReadTextFileRequest,
    ) -> Result<ReadTextFileResponse, ErrorObject> {
        match self.read(&request.path, request.line, request.limit).await {
            Ok(content) => Ok(ReadTextFileResponse::new(content)),
            Err(error) => Err(error.to_error_object()),
        }
    }

    async fn write_text_file(
        &self,
        request: WriteTextFileRequest,
    ) -> Result<WriteTextFileResponse, ErrorObject> {
        match self.write(&request.path, &request.content).await {
            Ok(()) => Ok(WriteTextFileResponse::new()),
            Err(error) => Err(error.to_error_object()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, line: Option<u32>, limit: Option<u32>, expect: Result<&str, FsError>) {
        assert_eq!(
            select_lines(text, line, limit),
            expect,
            "line {line:?} limit {limit:?}"
        );
    }

    #[test]
    fn line_and_limit_select_lines() {
        let text = "a\nb\nc\n";
        check(text, None, None, Ok(text));
        check(text, Some(1), None, Ok(text));
        check(text, Some(2), None, Ok("b\nc\n"));
        check(text, Some(2), Some(1), Ok("b\n"));
        check(text, Some(3), Some(5), Ok("c\n"));
        check(text, Some(4), None, Ok(""));
        check(text, Some(9), Some(1), Ok(""));
        check(text, Some(1), Some(0), Ok(""));
        check(text, Some(0), None, Err(FsError::InvalidLine));
        check("a\nb", Some(2), None, Ok("b"));
        check("", None, None, Ok(""));
        check("", Some(1), Some(1), Ok(""));
        check("é\nü", Some(2), Some(1), Ok("ü"));
    }

    #[test]
    fn error_codes_are_stable() {
        let cases = [
            (FsError::NotAbsolute, "not_absolute", -32602),
            (FsError::OutsideRoot, "outside_root", -32602),
            (FsError::NotFound, "not_found", -32002),
            (FsError::NotAFile, "not_a_file", -32602),
            (
                FsError::TooLarge { bytes: 2, limit: 1 },
                "too_large",
                -32602,
            ),
            (FsError::InvalidLine, "invalid_line", -32602),
            (FsError::NotUtf8, "not_utf8", -32602),
            (FsError::Io("x".into()), "io_error", -32603),
        ];
        for (error, code, rpc) in cases {
            assert_eq!(error.code(), code);
            assert_eq!(error.to_error_object().code.0, rpc);
        }
    }
}
