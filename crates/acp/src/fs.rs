//! [`RootedFs`]: the provided [`FsHandler`], confined to one directory tree by [`Confined`].
//!
//! Source: ACP v1 "File System" (`fs/read_text_file {sessionId, path, line?, limit?}` → `{content}`,
//! `fs/write_text_file {sessionId, path, content}` → `{}`); paths are absolute, `line` is 1-based.
//! Line selection is a pure function; [`Confined`] is the blocking, race-free resolution beneath a directory
//! descriptor (also for other crates: [`read_beneath`], [`write_beneath`]); the tokio shell is [`RootedFs`]'s
//! methods, which run it on the blocking pool.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_client_protocol_schema::v1::{
    ReadTextFileRequest, ReadTextFileResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use agentwire_jsonrpc::{ErrorCode, ErrorObject};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

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

/// Most symbolic links followed while resolving one path (Linux's own limit, `MAXSYMLINKS`, is 40).
const MAX_SYMLINKS: usize = 40;

/// Most directories held open at once while resolving one path (its depth below the root, after `..`).
const MAX_DEPTH: usize = 256;

/// Most attempts at a fresh temporary name before a write gives up (each collision is an `O_EXCL` refusal).
const MAX_TEMP_ATTEMPTS: u32 = 16;

/// Most bytes of the target's name kept in a temporary file's name, so that it stays under `NAME_MAX` (255).
const MAX_TEMP_STEM_BYTES: usize = 128;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How [`Confined`] resolves a path beneath its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    /// Linux `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` first; the walk when it refuses a path
    /// (an absolute symlink that may point inside the root, a `..` or link that leaves it) or is unavailable.
    Openat2ThenWalk,
    /// Only the per-component `O_NOFOLLOW` walk (every platform other than Linux, and tests of the walk).
    Walk,
}

/// What the walk resolves the last component to.
#[derive(Clone, Copy)]
enum Last {
    /// Open it as a file for reading (`O_NONBLOCK`, so a FIFO or device never blocks the open).
    Read,
    /// Stop at its directory: the caller creates or replaces the entry there.
    Parent,
}

/// The result of resolving a path beneath the root.
enum Resolved {
    File(OwnedFd),
    Parent { dir: OwnedFd, name: OsString },
}

/// A directory that file access is confined to, held open as a file descriptor: every path is resolved beneath that
/// descriptor at the moment of use, component by component, never following a symbolic link, `..` or magic link
/// out of it. Swapping a directory for a symlink while a request runs cannot make it read, write or leave files
/// outside the root (the check and the use are one operation on descriptors, not two lookups of a path).
///
/// - **Resolution.** On Linux, `openat2(root, rel, …, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`; when the kernel
///   refuses (an absolute symlink, a link or `..` leaving the root) or lacks `openat2` (before 5.6), a portable walk
///   decides: it opens one component at a time with `O_NOFOLLOW` from descriptors it holds, resolves each symlink
///   itself (an absolute target must lie under the root's path and is re-rooted at the descriptor; a relative one
///   continues from the directory holding it; `..` pops to a held parent and never above the root), at most
///   40 links and 256 levels deep. Other Unixes always walk.
/// - **Reads** open with `O_NONBLOCK | O_NOCTTY | O_CLOEXEC`, then `fstat` the descriptor: anything but a regular
///   file (FIFO, socket, device, directory) is refused as [`FsError::NotAFile`] without blocking.
/// - **Writes** resolve the target's directory to a descriptor (following a final symlink that stays inside),
///   create a temporary file there with `O_CREAT | O_EXCL | O_NOFOLLOW`, write and `fsync` it, then `renameat` it
///   over the target in that same directory; on failure the temporary file is removed. A replaced file keeps its
///   permission bits.
///
/// Limits (documented in `docs/architecture.md` too): the agent runs as the same user, so confinement protects
/// against mistakes and hostile *paths*, not against a process that can itself write outside the root. A process
/// that can write outside the root can also *move* a directory from inside the root to outside while a lookup is in
/// it; the lookup then continues there (with `openat2` as with the walk: the kernel guards `..` and symlinks, not
/// renames of the directories below the one it starts from). On platforms without `openat2`, the walk is as
/// race-free as `openat2` for symlink swaps, only slower (a system call or two per component). Mount points inside
/// the root are followed. Opening a device node with `O_NONBLOCK` is refused only after the open, which some drivers act on.
///
/// Source: the fault report "File confinement, race-free" (issue 12); openat2(2), `RESOLVE_BENEATH`.
#[derive(Debug)]
pub struct Confined {
    root: OwnedFd,
    /// Absolute forms of the root that request paths and absolute symlink targets may start with: the canonical
    /// path first, then the path as given when it differs.
    prefixes: Vec<PathBuf>,
    strategy: Strategy,
}

impl Confined {
    /// Opens `root` (a directory; symlinks in its own path are followed once, now) and confines access to it.
    ///
    /// # Errors
    ///
    /// The IO error when `root` does not exist, is not a directory or cannot be opened.
    pub fn open(root: impl AsRef<Path>) -> std::io::Result<Confined> {
        let given = std::path::absolute(root.as_ref())?;
        let canonical = std::fs::canonicalize(&given)?;
        let fd = rustix::fs::open(
            &canonical,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut prefixes = vec![canonical];
        if !prefixes.contains(&given) {
            prefixes.push(given);
        }
        Ok(Confined {
            root: fd,
            prefixes,
            strategy: Strategy::Openat2ThenWalk,
        })
    }

    /// Resolves with the portable per-component walk only, as on platforms without `openat2` (for tests and
    /// comparisons; [`Confined::open`] already picks the best available).
    pub fn walk_only(mut self) -> Confined {
        self.strategy = Strategy::Walk;
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        self.prefixes
            .first()
            .map_or(Path::new("/"), PathBuf::as_path)
    }

    /// The root's directory descriptor.
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The part of an absolute request `path` below the root (lexically: `..` is kept for the resolver to refuse).
    ///
    /// # Errors
    ///
    /// [`FsError::NotAbsolute`], or [`FsError::OutsideRoot`] when `path` does not start with the root.
    pub fn relative<'p>(&self, path: &'p Path) -> Result<&'p Path, FsError> {
        if !path.is_absolute() {
            return Err(FsError::NotAbsolute);
        }
        self.prefixes
            .iter()
            .find_map(|prefix| path.strip_prefix(prefix).ok())
            .ok_or(FsError::OutsideRoot)
    }

    /// Reads the regular file at `rel` (relative to the root) whole, refusing more than `max_bytes`. Blocking.
    ///
    /// # Errors
    ///
    /// [`FsError::OutsideRoot`], [`FsError::NotFound`], [`FsError::NotAFile`] (a directory, FIFO, socket or
    /// device), [`FsError::TooLarge`], [`FsError::Io`].
    pub fn read_file(&self, rel: &Path, max_bytes: u64) -> Result<Vec<u8>, FsError> {
        let fd = match self.resolve(rel, Last::Read)? {
            Resolved::File(fd) => fd,
            Resolved::Parent { .. } => return Err(FsError::NotAFile),
        };
        let stat = rustix::fs::fstat(&fd).map_err(from_errno)?;
        if file_type(&stat) != FileType::RegularFile {
            return Err(FsError::NotAFile);
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size > max_bytes {
            return Err(FsError::TooLarge {
                bytes: size,
                limit: max_bytes,
            });
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| FsError::from_io(&e))?;
        // The file may have grown since the fstat.
        if bytes.len() as u64 > max_bytes {
            return Err(FsError::TooLarge {
                bytes: bytes.len() as u64,
                limit: max_bytes,
            });
        }
        Ok(bytes)
    }

    /// Replaces (or creates) the file at `rel` (relative to the root; its directory must exist) with `bytes`,
    /// atomically: a temporary file created exclusively in the resolved directory, then renamed over the target
    /// within it. Blocking.
    ///
    /// # Errors
    ///
    /// [`FsError::OutsideRoot`], [`FsError::NotFound`] (no such directory), [`FsError::NotAFile`] (the target is a
    /// directory or another non-file), [`FsError::Io`].
    pub fn write_file(&self, rel: &Path, bytes: &[u8]) -> Result<(), FsError> {
        if split_last(rel).is_none() {
            // The root itself, `.` or `..`: a directory, never a file to replace.
            return Err(FsError::NotAFile);
        }
        let (dir, name) = match self.resolve(rel, Last::Parent)? {
            Resolved::Parent { dir, name } => (dir, name),
            Resolved::File(_) => return Err(FsError::NotAFile),
        };
        let existing = match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => match file_type(&stat) {
                FileType::RegularFile => Some(Mode::from_raw_mode(stat.st_mode & 0o7777)),
                // A symlink here was swapped in after resolution: the rename replaces the link itself.
                FileType::Symlink => None,
                _ => return Err(FsError::NotAFile),
            },
            Err(Errno::NOENT) => None,
            Err(errno) => return Err(from_errno(errno)),
        };
        let (temp_name, temp) = create_temp(&dir, &name)?;
        let written = write_temp(temp, bytes, existing).and_then(|()| {
            rustix::fs::renameat(&dir, temp_name.as_os_str(), &dir, name.as_os_str())
                .map_err(std::io::Error::from)
        });
        if let Err(error) = written {
            // Best effort: the original error is what matters.
            let _ = rustix::fs::unlinkat(&dir, temp_name.as_os_str(), AtFlags::empty());
            return Err(FsError::from_io(&error));
        }
        Ok(())
    }

    fn resolve(&self, rel: &Path, last: Last) -> Result<Resolved, FsError> {
        if self.strategy == Strategy::Openat2ThenWalk
            && let Some(resolved) = self.resolve_openat2(rel, last)?
        {
            return Ok(resolved);
        }
        self.walk(rel, last)
    }

    /// The `openat2` fast path; `None` when the walk must decide.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn resolve_openat2(&self, rel: &Path, last: Last) -> Result<Option<Resolved>, FsError> {
        use rustix::fs::ResolveFlags;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let open = |path: &Path, flags: OFlags| {
            let path = if path.as_os_str().is_empty() {
                Path::new(".")
            } else {
                path
            };
            rustix::fs::openat2(&self.root, path, flags, Mode::empty(), resolve)
        };
        match last {
            Last::Read => match open(rel, read_flags()) {
                Ok(fd) => Ok(Some(Resolved::File(fd))),
                Err(Errno::NOENT) => Err(FsError::NotFound),
                // EXDEV: a link or `..` leaves the root, or an absolute link (maybe back inside): the walk decides.
                // ENOSYS: no openat2 (Linux < 5.6). EAGAIN: a concurrent rename; ELOOP: a magic link.
                Err(_) => Ok(None),
            },
            Last::Parent => {
                let Some((parent, name)) = split_last(rel) else {
                    return Err(FsError::NotAFile);
                };
                let dir = match open(parent, dir_flags()) {
                    Ok(dir) => dir,
                    Err(Errno::NOENT) => return Err(FsError::NotFound),
                    Err(_) => return Ok(None),
                };
                match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    // A final symlink: the walk follows it while it stays inside.
                    Ok(stat) if file_type(&stat) == FileType::Symlink => Ok(None),
                    Ok(_) | Err(Errno::NOENT) => Ok(Some(Resolved::Parent {
                        dir,
                        name: name.to_owned(),
                    })),
                    Err(errno) => Err(from_errno(errno)),
                }
            }
        }
    }

    /// Without `openat2` (not Linux): the walk always decides.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    #[allow(clippy::unused_self, clippy::unnecessary_wraps)]
    fn resolve_openat2(&self, _rel: &Path, _last: Last) -> Result<Option<Resolved>, FsError> {
        Ok(None)
    }

    /// The portable resolver: one component at a time from held descriptors, `O_NOFOLLOW`, links resolved here.
    fn walk(&self, rel: &Path, last: Last) -> Result<Resolved, FsError> {
        let mut pending: VecDeque<OsString> = VecDeque::new();
        push_front_components(&mut pending, rel)?;
        // The directories entered below the root; empty = at the root.
        let mut held: Vec<OwnedFd> = Vec::new();
        let mut links = 0;
        while let Some(part) = pending.pop_front() {
            if part == ".." {
                if held.pop().is_none() {
                    return Err(FsError::OutsideRoot);
                }
                continue;
            }
            let dir = held.last().map_or(self.root.as_fd(), AsFd::as_fd);
            let is_last = pending.is_empty();
            if is_last && matches!(last, Last::Parent) {
                match rustix::fs::statat(dir, part.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) if file_type(&stat) == FileType::Symlink => {}
                    Ok(_) | Err(Errno::NOENT) => {
                        let dir = dir.try_clone_to_owned().map_err(|e| FsError::from_io(&e))?;
                        return Ok(Resolved::Parent { dir, name: part });
                    }
                    Err(errno) => return Err(from_errno(errno)),
                }
            } else {
                let flags = if is_last { read_flags() } else { dir_flags() };
                match rustix::fs::openat(
                    dir,
                    part.as_os_str(),
                    flags | OFlags::NOFOLLOW,
                    Mode::empty(),
                ) {
                    Ok(fd) if is_last => return Ok(Resolved::File(fd)),
                    Ok(fd) => {
                        if held.len() >= MAX_DEPTH {
                            return Err(FsError::Io("path is too deep".to_owned()));
                        }
                        held.push(fd);
                        continue;
                    }
                    Err(errno) => {
                        // Refused: a symlink (ELOOP, or ENOTDIR/EMLINK on some systems), or a real error.
                        match rustix::fs::statat(dir, part.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                            Ok(stat) if file_type(&stat) == FileType::Symlink => {}
                            _ => return Err(from_errno(errno)),
                        }
                    }
                }
            }
            // `part` is a symlink in `dir`: continue with its target instead.
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(FsError::Io("too many levels of symbolic links".to_owned()));
            }
            let target = match rustix::fs::readlinkat(dir, part.as_os_str(), Vec::new()) {
                Ok(target) => PathBuf::from(OsString::from_vec(target.into_bytes())),
                // Swapped for something else meanwhile: look at the name again.
                Err(Errno::INVAL) => {
                    pending.push_front(part);
                    continue;
                }
                Err(errno) => return Err(from_errno(errno)),
            };
            if target.is_absolute() {
                let inside = self
                    .prefixes
                    .iter()
                    .find_map(|prefix| target.strip_prefix(prefix).ok())
                    .ok_or(FsError::OutsideRoot)?;
                held.clear();
                push_front_components(&mut pending, inside)?;
            } else {
                push_front_components(&mut pending, &target)?;
            }
            if pending.is_empty() {
                // A link to the root itself.
                return Err(FsError::NotAFile);
            }
        }
        // Every component was consumed without reaching a file: the path names the root or a directory via `..`.
        Err(FsError::NotAFile)
    }
}

/// Reads the regular file at `rel` beneath the directory `root` — see [`Confined::read_file`]. `root_paths` are the
/// absolute paths of `root` that absolute symlinks inside it may use (may be empty: then every absolute link is
/// refused). Blocking.
///
/// # Errors
///
/// As [`Confined::read_file`]; the IO error of duplicating `root`.
pub fn read_beneath(
    root: BorrowedFd<'_>,
    root_paths: &[PathBuf],
    rel: &Path,
    max_bytes: u64,
) -> Result<Vec<u8>, FsError> {
    borrowed(root, root_paths)?.read_file(rel, max_bytes)
}

/// Replaces (or creates) the file at `rel` beneath the directory `root` — see [`Confined::write_file`]. Blocking.
///
/// # Errors
///
/// As [`Confined::write_file`]; the IO error of duplicating `root`.
pub fn write_beneath(
    root: BorrowedFd<'_>,
    root_paths: &[PathBuf],
    rel: &Path,
    bytes: &[u8],
) -> Result<(), FsError> {
    borrowed(root, root_paths)?.write_file(rel, bytes)
}

fn borrowed(root: BorrowedFd<'_>, root_paths: &[PathBuf]) -> Result<Confined, FsError> {
    Ok(Confined {
        root: root
            .try_clone_to_owned()
            .map_err(|e| FsError::from_io(&e))?,
        prefixes: root_paths.to_vec(),
        strategy: Strategy::Openat2ThenWalk,
    })
}

fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// `(parent, last name)` of a relative path whose last component is a name; `None` for the root, `.` or `..`.
fn split_last(rel: &Path) -> Option<(&Path, &OsStr)> {
    match rel.components().next_back() {
        Some(Component::Normal(name)) => Some((rel.parent().unwrap_or(Path::new("")), name)),
        _ => None,
    }
}

/// Puts `path`'s components (names and `..`; `.` dropped) in front of `pending`, in order.
fn push_front_components(pending: &mut VecDeque<OsString>, path: &Path) -> Result<(), FsError> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_owned()),
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(FsError::OutsideRoot),
        }
    }
    for part in parts.into_iter().rev() {
        pending.push_front(part);
    }
    Ok(())
}

/// Creates a fresh temporary file next to `name` in `dir` (`O_EXCL`; mode 0666 less the umask, as a new file).
fn create_temp(dir: &OwnedFd, name: &OsStr) -> Result<(OsString, OwnedFd), FsError> {
    let stem = name.as_bytes();
    let stem = String::from_utf8_lossy(stem.get(..MAX_TEMP_STEM_BYTES).unwrap_or(stem));
    let mut attempts = 0;
    loop {
        let temp_name = OsString::from(format!(
            ".{stem}.agentwire-{}-{}.tmp",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        match rustix::fs::openat(
            dir,
            temp_name.as_os_str(),
            flags,
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => return Ok((temp_name, fd)),
            Err(Errno::EXIST) if attempts < MAX_TEMP_ATTEMPTS => attempts += 1,
            Err(errno) => return Err(from_errno(errno)),
        }
    }
}

/// Writes and syncs the temporary file, giving it `mode` first when it replaces a file with that mode.
fn write_temp(temp: OwnedFd, bytes: &[u8], mode: Option<Mode>) -> std::io::Result<()> {
    if let Some(mode) = mode {
        rustix::fs::fchmod(&temp, mode)?;
    }
    let mut file = std::fs::File::from(temp);
    file.write_all(bytes)?;
    file.sync_all()
}

#[allow(clippy::useless_conversion)] // `st_mode` is u16 on some platforms, u32 on Linux.
fn file_type(stat: &rustix::fs::Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode.into())
}

fn from_errno(errno: Errno) -> FsError {
    match errno {
        // ENXIO: opening a socket (or a device with no driver); EISDIR: a directory where a file was expected.
        Errno::NXIO | Errno::ISDIR => FsError::NotAFile,
        errno => FsError::from_io(&std::io::Error::from(errno)),
    }
}

/// A file handler confined to one directory ([`Confined`]): ACP's absolute paths must start with the root; every
/// path is resolved beneath the root's descriptor at use time, refusing symlinks and `..` that leave it, for reads
/// and writes, with no window between check and use. Writes are atomic (a temporary file in the same directory,
/// then a rename), so the agent never leaves a half-written file. The blocking file work runs on tokio's blocking
/// pool and never waits on a FIFO or device.
#[derive(Debug)]
pub struct RootedFs {
    confined: Arc<Confined>,
    limits: FsLimits,
}

impl RootedFs {
    /// Confines requests to `root`, opened now.
    ///
    /// # Errors
    ///
    /// The IO error when `root` cannot be opened as a directory (does not exist).
    pub fn new(root: impl AsRef<Path>) -> std::io::Result<RootedFs> {
        Ok(RootedFs::from_confined(Confined::open(root)?))
    }

    /// Serves requests through an already opened [`Confined`] root.
    pub fn from_confined(confined: Confined) -> RootedFs {
        RootedFs {
            confined: Arc::new(confined),
            limits: FsLimits::default(),
        }
    }

    /// Replaces the size limits.
    pub fn with_limits(mut self, limits: FsLimits) -> RootedFs {
        self.limits = limits;
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        self.confined.root()
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
        let rel = self.confined.relative(path)?.to_owned();
        let confined = self.confined.clone();
        let max = self.limits.max_read_bytes;
        let bytes = tokio::task::spawn_blocking(move || confined.read_file(&rel, max))
            .await
            .map_err(|e| FsError::Io(e.to_string()))??;
        let text = String::from_utf8(bytes).map_err(|_| FsError::NotUtf8)?;
        Ok(select_lines(&text, line, limit)?.to_owned())
    }

    /// Writes `content` to `path` (absolute; its directory must exist inside the root), atomically.
    ///
    /// # Errors
    ///
    /// See [`FsError`].
    pub async fn write(&self, path: &Path, content: &str) -> Result<(), FsError> {
        self.write_string(path, content.to_owned()).await
    }

    async fn write_string(&self, path: &Path, content: String) -> Result<(), FsError> {
        let rel = self.confined.relative(path)?.to_owned();
        if content.len() as u64 > self.limits.max_write_bytes {
            return Err(FsError::TooLarge {
                bytes: content.len() as u64,
                limit: self.limits.max_write_bytes,
            });
        }
        let confined = self.confined.clone();
        tokio::task::spawn_blocking(move || confined.write_file(&rel, content.as_bytes()))
            .await
            .map_err(|e| FsError::Io(e.to_string()))?
    }
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
        match self.write_string(&request.path, request.content).await {
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
