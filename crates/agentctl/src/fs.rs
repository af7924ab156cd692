//! The `fs/*` service: ACP's client file-system methods, confined to the workdir (blocking IO; run it on a blocking
//! thread).
//!
//! Confinement: the root is canonicalized once; every path must be absolute and, once canonicalized (symlinks
//! followed), stay under the root. A write canonicalizes the longest existing ancestor, refuses `..` in the part
//! that does not exist yet, creates the missing parent directories and replaces the file atomically (temporary file
//! in the same directory + rename; an existing file keeps its permissions).
//! Known limit: a path swapped for a symlink between the check and the write (a race by a process that can write
//! inside the workdir) is not detected.
//!
//! Source: ACP schema v1 (`ReadTextFileRequest {sessionId, path, line?, limit?}` → `{content}`,
//! `WriteTextFileRequest {sessionId, path, content}` → `{}`); `protocols/agentctl.md` ("Agent-initiated requests").

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::router::FsMethod;

/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC "internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP "resource not found".
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// Why an `fs/*` request failed; answered to the agent as a JSON-RPC error with [`FsError::rpc_code`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The params do not match the method's shape.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// The path is relative (ACP paths are absolute).
    #[error("path must be absolute: {path}")]
    NotAbsolute {
        /// The path as given.
        path: String,
    },
    /// The path resolves outside the workdir (`..`, an absolute path elsewhere, or a symlink out).
    #[error("path is outside the workdir: {path}")]
    OutsideWorkdir {
        /// The path as given.
        path: String,
    },
    /// Nothing exists at the path (read), or it is a dangling symlink.
    #[error("no such file: {path}")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The path names a directory or another non-file.
    #[error("not a regular file: {path}")]
    NotAFile {
        /// The path as given.
        path: String,
    },
    /// The file is not UTF-8 text.
    #[error("file is not valid utf-8: {path}")]
    NotUtf8 {
        /// The path as given.
        path: String,
    },
    /// The file is larger than the message limit.
    #[error("file is larger than {limit} bytes: {path}")]
    TooLarge {
        /// The path as given.
        path: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// Another IO error.
    #[error("{path}: {message}")]
    Io {
        /// The path as given.
        path: String,
        /// The OS error message.
        message: String,
    },
}

impl FsError {
    /// Stable snake_case code (sent as `error.data.code`).
    pub fn code(&self) -> &'static str {
        match self {
            FsError::InvalidParams(_) => "invalid_params",
            FsError::NotAbsolute { .. } => "not_absolute",
            FsError::OutsideWorkdir { .. } => "outside_workdir",
            FsError::NotFound { .. } => "not_found",
            FsError::NotAFile { .. } => "not_a_file",
            FsError::NotUtf8 { .. } => "not_utf8",
            FsError::TooLarge { .. } => "too_large",
            FsError::Io { .. } => "io_error",
        }
    }

    /// The JSON-RPC error code: -32602 for bad paths and params, -32002 for a missing file, -32603 otherwise.
    pub fn rpc_code(&self) -> i64 {
        match self {
            FsError::InvalidParams(_)
            | FsError::NotAbsolute { .. }
            | FsError::OutsideWorkdir { .. } => INVALID_PARAMS,
            FsError::NotFound { .. } => RESOURCE_NOT_FOUND,
            _ => INTERNAL_ERROR,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadParams {
    path: String,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

#[derive(Deserialize)]
struct WriteParams {
    path: String,
    content: String,
}

/// Serves `fs/*` inside one root directory.
#[derive(Clone, Debug)]
pub struct FsService {
    root: PathBuf,
    max_file_bytes: usize,
}

impl FsService {
    /// A service confined to `workdir` (canonicalized now); files larger than `max_file_bytes` are refused.
    ///
    /// # Errors
    /// The workdir cannot be canonicalized (it does not exist, …).
    pub fn new(workdir: &Path, max_file_bytes: usize) -> io::Result<Self> {
        Ok(Self {
            root: workdir.canonicalize()?,
            max_file_bytes,
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Serves one request: `params` is the request's params as JSON text; returns the result value.
    ///
    /// # Errors
    /// [`FsError`], answered to the agent as a JSON-RPC error.
    pub fn serve(&self, method: FsMethod, params: &str) -> Result<serde_json::Value, FsError> {
        match method {
            FsMethod::ReadTextFile => {
                let params: ReadParams = serde_json::from_str(params)
                    .map_err(|e| FsError::InvalidParams(e.to_string()))?;
                let content = self.read(&params.path, params.line, params.limit)?;
                Ok(serde_json::json!({ "content": content }))
            }
            FsMethod::WriteTextFile => {
                let params: WriteParams = serde_json::from_str(params)
                    .map_err(|e| FsError::InvalidParams(e.to_string()))?;
                self.write(&params.path, &params.content)?;
                Ok(serde_json::json!({}))
            }
        }
    }

    /// Reads a text file, optionally from 1-based `line` (0 is refused with [`FsError::InvalidParams`], ACP lines
    /// are 1-based) for at most `limit` lines. A path with a NUL byte is [`FsError::InvalidParams`] too.
    ///
    /// # Errors
    /// See [`FsError`].
    pub fn read(
        &self,
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
    ) -> Result<String, FsError> {
        if line == Some(0) {
            return Err(FsError::InvalidParams(
                "line is 1-based: 0 is not a line".to_owned(),
            ));
        }
        let (canonical, missing) = self.resolve(path)?;
        if !missing.is_empty() {
            return Err(FsError::NotFound {
                path: path.to_owned(),
            });
        }
        // A FIFO, socket or device must not block this thread: check the type before opening, open without
        // blocking (O_NONBLOCK: opening a FIFO with no writer returns at once), then check the opened file again
        // (the path may have been swapped in between). O_NONBLOCK does not change reads of a regular file.
        let before = std::fs::metadata(&canonical).map_err(|e| io_error(path, &e))?;
        if !before.is_file() {
            return Err(FsError::NotAFile {
                path: path.to_owned(),
            });
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed())
            .open(&canonical)
            .map_err(|e| io_error(path, &e))?;
        let metadata = file.metadata().map_err(|e| io_error(path, &e))?;
        if !metadata.is_file() {
            return Err(FsError::NotAFile {
                path: path.to_owned(),
            });
        }
        let cap = u64::try_from(self.max_file_bytes)
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let mut bytes = Vec::new();
        file.take(cap)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(path, &e))?;
        if bytes.len() > self.max_file_bytes {
            return Err(FsError::TooLarge {
                path: path.to_owned(),
                limit: self.max_file_bytes,
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| FsError::NotUtf8 {
            path: path.to_owned(),
        })?;
        if line.is_none() && limit.is_none() {
            return Ok(text);
        }
        let skip = usize::try_from(line.unwrap_or(1).saturating_sub(1)).unwrap_or(usize::MAX);
        let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        Ok(text.split_inclusive('\n').skip(skip).take(take).collect())
    }

    /// Writes a text file, creating missing parent directories, replacing an existing file atomically.
    ///
    /// # Errors
    /// See [`FsError`].
    pub fn write(&self, path: &str, content: &str) -> Result<(), FsError> {
        let (canonical, missing) = self.resolve(path)?;
        let target = match missing.split_first() {
            None => {
                if !canonical.is_file() {
                    return Err(FsError::NotAFile {
                        path: path.to_owned(),
                    });
                }
                canonical
            }
            Some((file_name, dirs)) => {
                if !canonical.is_dir() {
                    return Err(FsError::NotAFile {
                        path: path.to_owned(),
                    });
                }
                let mut dir = canonical;
                for name in dirs.iter().rev() {
                    dir.push(name);
                }
                std::fs::create_dir_all(&dir).map_err(|e| io_error(path, &e))?;
                dir.join(file_name)
            }
        };
        let parent = target.parent().ok_or_else(|| FsError::OutsideWorkdir {
            path: path.to_owned(),
        })?;
        let mut temp = tempfile::Builder::new()
            .prefix(".agentctl-write-")
            .tempfile_in(parent)
            .map_err(|e| io_error(path, &e))?;
        temp.write_all(content.as_bytes())
            .map_err(|e| io_error(path, &e))?;
        temp.as_file().sync_all().map_err(|e| io_error(path, &e))?;
        if let Ok(metadata) = std::fs::metadata(&target) {
            std::fs::set_permissions(temp.path(), metadata.permissions())
                .map_err(|e| io_error(path, &e))?;
        }
        temp.persist(&target)
            .map_err(|e| io_error(path, &e.error))?;
        Ok(())
    }

    /// Canonicalizes the longest existing ancestor of `path` (symlinks followed) and checks it is under the root.
    /// Returns it and the names below it that do not exist yet (innermost first); a path ending in `..` below
    /// a missing directory is refused.
    fn resolve(&self, path: &str) -> Result<(PathBuf, Vec<OsString>), FsError> {
        if path.contains('\0') {
            return Err(FsError::InvalidParams(
                "path contains a NUL byte".to_owned(),
            ));
        }
        let mut existing = absolute(path)?;
        let mut missing: Vec<OsString> = Vec::new();
        loop {
            match std::fs::symlink_metadata(&existing) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let (Some(name), Some(parent)) = (existing.file_name(), existing.parent())
                    else {
                        return Err(FsError::OutsideWorkdir {
                            path: path.to_owned(),
                        });
                    };
                    missing.push(name.to_owned());
                    existing = parent.to_path_buf();
                }
                Err(e) => return Err(io_error(path, &e)),
            }
        }
        // `existing` exists, maybe as a dangling symlink, which canonicalize reports as not found.
        let canonical = existing.canonicalize().map_err(|e| io_error(path, &e))?;
        self.confine(path, &canonical)?;
        Ok((canonical, missing))
    }

    fn confine(&self, path: &str, canonical: &Path) -> Result<(), FsError> {
        if canonical.starts_with(&self.root) {
            Ok(())
        } else {
            Err(FsError::OutsideWorkdir {
                path: path.to_owned(),
            })
        }
    }
}

fn absolute(path: &str) -> Result<PathBuf, FsError> {
    let given = PathBuf::from(path);
    if !given.is_absolute() {
        return Err(FsError::NotAbsolute {
            path: path.to_owned(),
        });
    }
    Ok(given)
}

fn io_error(path: &str, error: &io::Error) -> FsError {
    match error.kind() {
        io::ErrorKind::NotFound => FsError::NotFound {
            path: path.to_owned(),
        },
        _ => FsError::Io {
            path: path.to_owned(),
            message: error.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Workspace {
        _outside: tempfile::TempDir,
        _root: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        fs: FsService,
    }

    fn workspace(max_file_bytes: usize) -> Workspace {
        let root_dir = tempfile::tempdir().unwrap();
        let outside_dir = tempfile::tempdir().unwrap();
        let root = root_dir.path().canonicalize().unwrap();
        let outside = outside_dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(outside.join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link-out")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("dir-out")).unwrap();
        std::os::unix::fs::symlink(root.join("a.txt"), root.join("link-in")).unwrap();
        std::os::unix::fs::symlink(outside.join("nothing-yet"), root.join("dangling")).unwrap();
        let fs = FsService::new(&root, max_file_bytes).unwrap();
        Workspace {
            _outside: outside_dir,
            _root: root_dir,
            root,
            outside,
            fs,
        }
    }

    fn check_read(
        ws: &Workspace,
        path: &str,
        line: Option<u64>,
        limit: Option<u64>,
        expect: Result<&str, &str>,
    ) {
        let got = ws.fs.read(path, line, limit).map_err(|e| e.code());
        assert_eq!(
            got.as_deref(),
            expect.as_deref(),
            "read {path} {line:?} {limit:?}"
        );
    }

    #[test]
    fn reads_inside_the_workdir_with_line_and_limit() {
        let ws = workspace(1024);
        let a = ws.root.join("a.txt");
        let a = a.to_str().unwrap();
        check_read(&ws, a, None, None, Ok("one\ntwo\nthree\n"));
        check_read(&ws, a, Some(2), None, Ok("two\nthree\n"));
        check_read(&ws, a, Some(2), Some(1), Ok("two\n"));
        check_read(&ws, a, None, Some(1), Ok("one\n"));
        check_read(&ws, a, Some(1), Some(1), Ok("one\n"));
        check_read(&ws, a, Some(9), None, Ok(""));
        check_read(
            &ws,
            ws.root.join("link-in").to_str().unwrap(),
            None,
            Some(1),
            Ok("one\n"),
        );
    }

    #[test]
    fn line_zero_and_a_nul_in_the_path_are_invalid_params() {
        let ws = workspace(1024);
        let a = ws.root.join("a.txt");
        let a = a.to_str().unwrap();
        check_read(&ws, a, Some(0), None, Err("invalid_params"));
        check_read(&ws, a, Some(0), Some(1), Err("invalid_params"));
        let nul = format!("{a}\0b");
        check_read(&ws, &nul, None, None, Err("invalid_params"));
        let error = ws.fs.read(&nul, None, None).unwrap_err();
        assert_eq!(error.rpc_code(), INVALID_PARAMS);
        let error = ws.fs.read(a, Some(0), None).unwrap_err();
        assert_eq!(error.rpc_code(), INVALID_PARAMS);
    }

    #[test]
    fn reads_that_escape_the_workdir_are_refused() {
        let ws = workspace(1024);
        let root = ws.root.to_str().unwrap();
        check_read(
            &ws,
            &format!(
                "{root}/../{}/secret.txt",
                ws.outside.file_name().unwrap().to_str().unwrap()
            ),
            None,
            None,
            Err("outside_workdir"),
        );
        check_read(
            &ws,
            ws.outside.join("secret.txt").to_str().unwrap(),
            None,
            None,
            Err("outside_workdir"),
        );
        check_read(
            &ws,
            &format!("{root}/link-out"),
            None,
            None,
            Err("outside_workdir"),
        );
        check_read(
            &ws,
            &format!("{root}/dir-out/secret.txt"),
            None,
            None,
            Err("outside_workdir"),
        );
        check_read(&ws, "a.txt", None, None, Err("not_absolute"));
        check_read(
            &ws,
            &format!("{root}/missing"),
            None,
            None,
            Err("not_found"),
        );
        check_read(&ws, root, None, None, Err("not_a_file"));
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_without_blocking() {
        let ws = workspace(1024);
        let fifo = ws.root.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // No writer ever opens the FIFO: a blocking open would hang this test.
        let error = ws.fs.read(fifo.to_str().unwrap(), None, None).unwrap_err();
        assert_eq!(error.code(), "not_a_file");
        let error = ws
            .fs
            .read(ws.root.to_str().unwrap(), None, None)
            .unwrap_err();
        assert_eq!(error.code(), "not_a_file");
    }

    #[test]
    fn read_size_is_checked_at_the_limit_and_one_past_it() {
        let ws = workspace(14);
        let a = ws.root.join("a.txt");
        check_read(
            &ws,
            a.to_str().unwrap(),
            None,
            None,
            Ok("one\ntwo\nthree\n"),
        );
        let ws = workspace(13);
        check_read(
            &ws,
            ws.root.join("a.txt").to_str().unwrap(),
            None,
            None,
            Err("too_large"),
        );
        std::fs::write(ws.root.join("bin"), b"\xff\xfe").unwrap();
        check_read(
            &ws,
            ws.root.join("bin").to_str().unwrap(),
            None,
            None,
            Err("not_utf8"),
        );
    }

    #[test]
    fn writes_create_parent_directories_and_replace_files() {
        let ws = workspace(1024);
        let nested = ws.root.join("new/dir/file.txt");
        ws.fs.write(nested.to_str().unwrap(), "hello").unwrap();
        assert_eq!(std::fs::read_to_string(&nested).unwrap(), "hello");
        ws.fs.write(nested.to_str().unwrap(), "again").unwrap();
        assert_eq!(std::fs::read_to_string(&nested).unwrap(), "again");
        ws.fs
            .write(ws.root.join("link-in").to_str().unwrap(), "via link")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.root.join("a.txt")).unwrap(),
            "via link"
        );
        let leftovers: Vec<_> = std::fs::read_dir(ws.root.join("new/dir"))
            .unwrap()
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn writes_that_escape_the_workdir_are_refused() {
        let ws = workspace(1024);
        let root = ws.root.to_str().unwrap();
        for (path, code) in [
            (format!("{root}/link-out"), "outside_workdir"),
            (format!("{root}/dir-out/new.txt"), "outside_workdir"),
            (format!("{root}/dir-out/sub/new.txt"), "outside_workdir"),
            (format!("{root}/../escape.txt"), "outside_workdir"),
            (
                format!("{root}/missing/../../escape.txt"),
                "outside_workdir",
            ),
            (format!("{root}/dangling"), "not_found"),
            ("relative.txt".to_owned(), "not_absolute"),
            (root.to_owned(), "not_a_file"),
        ] {
            let got = ws.fs.write(&path, "x").map_err(|e| e.code());
            assert_eq!(got, Err(code), "write {path}");
        }
        assert_eq!(
            std::fs::read_to_string(ws.outside.join("secret.txt")).unwrap(),
            "secret"
        );
        assert!(!ws.outside.join("new.txt").exists());
        assert!(!ws.outside.join("nothing-yet").exists());
        assert!(!ws.root.parent().unwrap().join("escape.txt").exists());
    }

    #[test]
    fn serve_maps_params_and_errors() {
        let ws = workspace(1024);
        let a = ws.root.join("a.txt");
        let params = serde_json::json!({"sessionId": "s", "path": a, "line": 3}).to_string();
        assert_eq!(
            ws.fs.serve(FsMethod::ReadTextFile, &params).unwrap(),
            serde_json::json!({"content": "three\n"})
        );
        let err = ws
            .fs
            .serve(FsMethod::ReadTextFile, r#"{"sessionId":"s"}"#)
            .unwrap_err();
        assert_eq!(
            (err.code(), err.rpc_code()),
            ("invalid_params", INVALID_PARAMS)
        );
        let params =
            serde_json::json!({"sessionId": "s", "path": ws.root.join("w.txt"), "content": "c"})
                .to_string();
        assert_eq!(
            ws.fs.serve(FsMethod::WriteTextFile, &params).unwrap(),
            serde_json::json!({})
        );
        let err = ws
            .fs
            .read(ws.root.join("nope").to_str().unwrap(), None, None)
            .unwrap_err();
        assert_eq!(err.rpc_code(), RESOURCE_NOT_FOUND);
    }
}
