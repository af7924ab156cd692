//! Typed errors of this crate: starting a child ([`SpawnError`]) and writing to its stdin ([`StdinError`]).

use std::ffi::OsStr;
use std::io;
use std::path::Path;

use crate::command::display_program;

/// Why [`crate::Command::spawn`] failed.
///
/// Messages name the program (and the working directory where relevant), never an argument or an environment value.
/// Each variant has a stable [`SpawnError::code`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The executable does not exist (or is not on the child's `PATH`). Code `executable_not_found`.
    #[error("executable not found: {program}")]
    NotFound {
        /// The program as given to [`crate::Command::new`].
        program: String,
    },
    /// The OS refused to execute the program (`EACCES`). Code `permission_denied`.
    #[error("permission denied executing {program}")]
    PermissionDenied {
        /// The program as given to [`crate::Command::new`].
        program: String,
    },
    /// The file exists but is not an executable (no execute bit, a directory, or an unknown format). Code `not_executable`.
    ///
    /// For a bare program name this means every file of that name on the `PATH` searched is a directory or has no
    /// execute bit.
    #[error("not an executable: {program}")]
    NotExecutable {
        /// The program as given to [`crate::Command::new`].
        program: String,
    },
    /// The program is a script whose interpreter (the `#!` line) does not exist. Code `interpreter_not_found`.
    #[error("interpreter of {program} not found")]
    InterpreterNotFound {
        /// The program as given to [`crate::Command::new`].
        program: String,
    },
    /// The working directory set with [`crate::Command::current_dir`] does not exist. Code `working_dir_not_found`.
    #[error("working directory not found: {dir} (running {program})")]
    WorkingDirNotFound {
        /// The program as given to [`crate::Command::new`].
        program: String,
        /// The working directory (lossy UTF-8).
        dir: String,
    },
    /// The working directory set with [`crate::Command::current_dir`] exists but is not a directory (a file).
    /// Code `working_dir_not_a_directory`.
    #[error("working directory is not a directory: {dir} (running {program})")]
    WorkingDirNotADirectory {
        /// The program as given to [`crate::Command::new`].
        program: String,
        /// The working directory (lossy UTF-8).
        dir: String,
    },
    /// A name given to [`crate::Command::env`] cannot name an environment variable: it is empty, or contains `=`
    /// or NUL. Nothing was started. Code `invalid_env_name`.
    ///
    /// `name` is redacted: the part before the first `=`/NUL, then `***` (`TOKEN=sk-…` is shown as `TOKEN=***`);
    /// the value is never kept.
    #[error("invalid environment variable name {name:?} for {program}: {reason}")]
    InvalidEnvName {
        /// The program as given to [`crate::Command::new`].
        program: String,
        /// The redacted name.
        name: String,
        /// What is wrong with it, e.g. `the name contains '='`.
        reason: &'static str,
    },
    /// `spawn` was called outside a tokio runtime. Code `no_tokio_runtime`.
    #[error("cannot spawn {program}: no tokio runtime is running")]
    NoRuntime {
        /// The program as given to [`crate::Command::new`].
        program: String,
    },
    /// Any other OS error while starting the child. Code `spawn_failed`.
    #[error("failed to spawn {program}: {source}")]
    Io {
        /// The program as given to [`crate::Command::new`].
        program: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl SpawnError {
    /// Stable snake_case code for this error, for logs and for errors crossing a process boundary.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "executable_not_found",
            Self::PermissionDenied { .. } => "permission_denied",
            Self::NotExecutable { .. } => "not_executable",
            Self::InterpreterNotFound { .. } => "interpreter_not_found",
            Self::WorkingDirNotFound { .. } => "working_dir_not_found",
            Self::WorkingDirNotADirectory { .. } => "working_dir_not_a_directory",
            Self::InvalidEnvName { .. } => "invalid_env_name",
            Self::NoRuntime { .. } => "no_tokio_runtime",
            Self::Io { .. } => "spawn_failed",
        }
    }

    /// The program that failed to start.
    pub fn program(&self) -> &str {
        match self {
            Self::NotFound { program }
            | Self::PermissionDenied { program }
            | Self::NotExecutable { program }
            | Self::InterpreterNotFound { program }
            | Self::WorkingDirNotFound { program, .. }
            | Self::WorkingDirNotADirectory { program, .. }
            | Self::InvalidEnvName { program, .. }
            | Self::NoRuntime { program }
            | Self::Io { program, .. } => program,
        }
    }

    /// Classifies the OS error of a failed spawn.
    ///
    /// `ENOENT` and `ENOTDIR` are ambiguous (program or working directory), so the working directory is checked
    /// after the fact; `EACCES` on a program that is a directory or has no execute bit (by path, or every match on
    /// `search_path` for a bare name) is reported as not executable.
    pub(crate) fn from_io(
        program: &OsStr,
        current_dir: Option<&Path>,
        search_path: Option<&OsStr>,
        err: io::Error,
    ) -> Self {
        let name = display_program(program);
        if err.kind() == io::ErrorKind::NotADirectory {
            if let Some(dir) = current_dir.filter(|d| !d.is_dir()) {
                let dir_text = dir.to_string_lossy().into_owned();
                return if dir.exists() {
                    Self::WorkingDirNotADirectory {
                        program: name,
                        dir: dir_text,
                    }
                } else {
                    Self::WorkingDirNotFound {
                        program: name,
                        dir: dir_text,
                    }
                };
            }
            // A component of the program's path is a file: there is no such executable.
            return Self::NotFound { program: name };
        }
        if err.kind() == io::ErrorKind::NotFound {
            if let Some(dir) = current_dir.filter(|d| !d.is_dir()) {
                return Self::WorkingDirNotFound {
                    program: name,
                    dir: dir.to_string_lossy().into_owned(),
                };
            }
            if resolved_path(program, current_dir).is_some_and(|p| p.is_file()) {
                return Self::InterpreterNotFound { program: name };
            }
            return Self::NotFound { program: name };
        }
        #[cfg(unix)]
        if let Some(errno) = rustix::io::Errno::from_io_error(&err) {
            if errno == rustix::io::Errno::NOEXEC {
                return Self::NotExecutable { program: name };
            }
            if errno == rustix::io::Errno::ACCESS {
                return if is_without_exec(program, current_dir, search_path) {
                    Self::NotExecutable { program: name }
                } else {
                    Self::PermissionDenied { program: name }
                };
            }
        }
        if err.kind() == io::ErrorKind::PermissionDenied {
            return Self::PermissionDenied { program: name };
        }
        Self::Io {
            program: name,
            source: err,
        }
    }
}

/// The file `program` names when it is a path (has a separator); `None` for a bare name searched on `PATH`.
fn resolved_path(program: &OsStr, current_dir: Option<&Path>) -> Option<std::path::PathBuf> {
    let path = Path::new(program);
    if path.components().count() < 2 && !path.is_absolute() {
        return None;
    }
    Some(match current_dir {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    })
}

/// Whether `program` is a directory or a file without any execute bit: by path, or for a bare name, every match
/// on `search_path` (the `execvp` search reports `EACCES` when an entry of that name exists but cannot run).
#[cfg(unix)]
fn is_without_exec(
    program: &OsStr,
    current_dir: Option<&Path>,
    search_path: Option<&OsStr>,
) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let cannot_run = |path: &Path| match std::fs::metadata(path) {
        Ok(meta) => Some(meta.is_dir() || meta.permissions().mode() & 0o111 == 0),
        Err(_) => None, // absent here: the search went on
    };
    if let Some(path) = resolved_path(program, current_dir) {
        return cannot_run(&path).unwrap_or(false);
    }
    let Some(search_path) = search_path else {
        return false;
    };
    let mut matches = std::env::split_paths(search_path)
        .map(|entry| match current_dir {
            Some(dir) if entry.is_relative() => dir.join(entry).join(program),
            _ => entry.join(program),
        })
        .filter_map(|candidate| cannot_run(&candidate))
        .peekable();
    // At least one match, and none of them could run (else the EACCES came from elsewhere: a mount, a search
    // permission on a directory of the path).
    matches.peek().is_some() && matches.all(|cannot| cannot)
}

/// Why a write to the child's stdin ([`crate::Stdin`]) failed.
///
/// A failed write is never retried: the bytes may be partially written, so the handle closes stdin and every later
/// write returns [`StdinError::Closed`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StdinError {
    /// Stdin was closed earlier (by [`crate::Stdin::close`], a stop, or an earlier failed write). Code `stdin_closed`.
    #[error("stdin is closed")]
    Closed,
    /// The child no longer reads its stdin (it exited or closed it): `EPIPE`. Code `stdin_broken_pipe`.
    #[error("child is not reading stdin (broken pipe)")]
    BrokenPipe,
    /// A line given to [`crate::Stdin::write_line`] contains a `\n` before its end. Nothing was written.
    /// Code `stdin_invalid_line`.
    #[error("line contains a newline at byte {position}")]
    NewlineInLine {
        /// Byte offset of the first embedded `\n`.
        position: usize,
    },
    /// Any other write error. Code `stdin_write_failed`.
    #[error("stdin write failed: {0}")]
    Io(#[source] io::Error),
}

impl StdinError {
    /// Stable snake_case code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Closed => "stdin_closed",
            Self::BrokenPipe => "stdin_broken_pipe",
            Self::NewlineInLine { .. } => "stdin_invalid_line",
            Self::Io(_) => "stdin_write_failed",
        }
    }

    pub(crate) fn from_io(err: io::Error) -> Self {
        if err.kind() == io::ErrorKind::BrokenPipe {
            Self::BrokenPipe
        } else {
            Self::Io(err)
        }
    }
}
