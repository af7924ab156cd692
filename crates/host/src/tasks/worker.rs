//! The worker side of managed tasks: the executable allow-list (the final authority on what runs) and running one
//! task through `agentwire-process` (no shell, own process group, bounded output, timeout stops the group).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwire_process::{CancellationToken, Command, StdoutItem, StopPlan, WaitOutcome};

use crate::tasks::model::{TaskLimits, TaskRecord, TaskStatus};
use crate::tasks::store::TaskOutcome;

/// An `--tasks-allow` entry that cannot be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum AllowListError {
    /// The path does not exist or cannot be resolved.
    #[error("allowed executable {path} cannot be resolved")]
    NotFound {
        /// The path as given.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The path (after resolving symlinks) is not an executable regular file.
    #[error("allowed executable {path} is not an executable regular file")]
    NotExecutable {
        /// The path as given.
        path: PathBuf,
    },
}

impl AllowListError {
    /// Stable machine-readable code: `tasks_allow_invalid`.
    pub fn code(&self) -> &'static str {
        "tasks_allow_invalid"
    }
}

/// The executables a worker may run, as canonical paths (symlinks resolved).
///
/// The worker checks every task at execution time, whatever the submitter sent: `argv[0]` is resolved (a name
/// through the server's `PATH`, a path as given, relative paths against the server's working directory), then
/// canonicalized; only a canonical path on this list is spawned, and it is spawned by that canonical path.
/// Anything else, a program that does not exist included, ends the task `failed` with `executable_not_allowed`
/// (one code, so the API cannot be used to probe which files exist). An empty list allows nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: BTreeSet<PathBuf>,
}

#[cfg(unix)]
fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

impl AllowList {
    /// An allow-list of `paths`, each canonicalized now.
    ///
    /// # Errors
    /// [`AllowListError`] for the first path that does not resolve to an executable regular file.
    pub fn new<I, P>(paths: I) -> Result<Self, AllowListError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut list = Self::default();
        for path in paths {
            list.add(path.as_ref())?;
        }
        Ok(list)
    }

    /// Adds one executable (canonicalized now), e.g. a declared tool driver's binary.
    ///
    /// # Errors
    /// As [`AllowList::new`].
    pub fn add(&mut self, path: &Path) -> Result<(), AllowListError> {
        let canonical = std::fs::canonicalize(path).map_err(|source| AllowListError::NotFound {
            path: path.to_path_buf(),
            source,
        })?;
        if !is_executable_file(&canonical) {
            return Err(AllowListError::NotExecutable {
                path: path.to_path_buf(),
            });
        }
        self.entries.insert(canonical);
        Ok(())
    }

    /// The canonical paths on the list.
    pub fn entries(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().map(PathBuf::as_path)
    }

    /// Resolves `program` (a task's `argv[0]`) to the canonical path to spawn, searching `search_path` (a
    /// `PATH`-style list) for a bare name.
    ///
    /// # Errors
    /// `executable_not_allowed` (as a `&'static str` code) when it does not resolve to a listed file.
    pub fn resolve(
        &self,
        program: &str,
        search_path: Option<&OsStr>,
    ) -> Result<PathBuf, &'static str> {
        const REFUSED: &str = "executable_not_allowed";
        let candidate = if program.contains('/') {
            Some(PathBuf::from(program))
        } else {
            search_path.and_then(|paths| {
                std::env::split_paths(paths)
                    .filter(|dir| dir.is_absolute())
                    .map(|dir| dir.join(program))
                    .find(|path| is_executable_file(path))
            })
        };
        let canonical = candidate
            .and_then(|c| std::fs::canonicalize(c).ok())
            .ok_or(REFUSED)?;
        if self.entries.contains(&canonical) {
            Ok(canonical)
        } else {
            Err(REFUSED)
        }
    }
}

/// How workers run tasks. Every field documents its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Tasks run at once. Default 2 (minimum 1).
    pub workers: usize,
    /// After a timeout, how long the group gets between SIGTERM and SIGKILL. Default 2 s.
    pub term_grace: Duration,
    /// After the program exits, how long output still in flight is read (grandchildren holding a pipe do not
    /// hold the task). Default 2 s.
    pub drain_window: Duration,
    /// Working directory of tasks. Default `None`: the server's.
    pub working_dir: Option<PathBuf>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            term_grace: Duration::from_secs(2),
            drain_window: Duration::from_secs(2),
            working_dir: None,
        }
    }
}

/// Runs one claimed task to its end and says how it ended. Never panics on the task's input.
///
/// The allow-list is checked first (nothing is spawned for a refused program). The child gets the OS environment
/// allowlist only, stdin closed, its own process group. Stdout keeps its first [`TaskLimits::max_output_bytes`],
/// stderr its last; the rest is read and dropped. Past `timeout_seconds` the group is stopped (SIGTERM,
/// `term_grace`, SIGKILL) and the task is `timed_out`. When `cancel` fires (the server is stopping) the group is
/// stopped the same way and the task is `lost` with `host_stopped`: it is not re-run.
pub async fn run_task(
    task: &TaskRecord,
    allow: &AllowList,
    limits: &TaskLimits,
    config: &WorkerConfig,
    cancel: &CancellationToken,
) -> TaskOutcome {
    let Some((program, args)) = task.argv.split_first() else {
        return TaskOutcome::refused("argv_invalid");
    };
    let search_path = std::env::var_os("PATH");
    let executable = match allow.resolve(program, search_path.as_deref()) {
        Ok(path) => path,
        Err(code) => {
            tracing::info!(task = %task.id, code, "task refused by the executable allow-list");
            return TaskOutcome::refused(code);
        }
    };
    let max = limits.max_output_bytes;
    let mut command = Command::new(&executable);
    command
        .args(args)
        .inherit_os_env()
        .drain_window(config.drain_window)
        .stderr_tail_bytes(max);
    if let Some(dir) = &config.working_dir {
        command.current_dir(dir);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            tracing::warn!(task = %task.id, code = error.code(), %error, "task spawn failed");
            return TaskOutcome::refused("spawn_failed");
        }
    };
    child.stdin().close().await;
    let stdout = child.take_stdout();
    let read_stdout = async move {
        let mut kept = Vec::new();
        let mut truncated = false;
        if let Some(mut stdout) = stdout {
            while let Some(item) = stdout.next().await {
                let StdoutItem::Bytes(bytes) = item else {
                    continue;
                };
                let room = max.saturating_sub(kept.len());
                if bytes.len() > room {
                    truncated = true;
                }
                kept.extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
            }
        }
        (kept, truncated)
    };
    let plan = StopPlan::new()
        .stdin_grace(Duration::ZERO)
        .term_grace(config.term_grace);
    let (waited, (stdout, stdout_truncated)) = tokio::join!(
        child.wait_or_stop(cancel, Some(task_timeout(task)), plan),
        read_stdout
    );
    let tail = child.stderr_tail();
    tail.finished().await;
    let (stderr, stderr_total) = tail.snapshot();
    let stderr_truncated = stderr_total > stderr.len() as u64;
    let (status, exit, error_code) = match waited {
        WaitOutcome::Exited(status) if status.success() => (TaskStatus::Succeeded, status, None),
        WaitOutcome::Exited(status) => (TaskStatus::Failed, status, None),
        WaitOutcome::TimedOut(stop) => (TaskStatus::TimedOut, stop.status, Some("timed_out")),
        WaitOutcome::Cancelled(stop) => (TaskStatus::Lost, stop.status, Some("host_stopped")),
        other => (TaskStatus::Failed, other.status(), Some("internal")),
    };
    TaskOutcome {
        status,
        exit_code: exit.code,
        signal: exit.signal,
        stdout,
        stderr: stderr.to_vec(),
        stdout_truncated,
        stderr_truncated,
        error_code: error_code.map(str::to_owned),
    }
}

fn task_timeout(task: &TaskRecord) -> Duration {
    Duration::from_secs(task.timeout_seconds)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn resolution_goes_through_path_and_symlinks_to_the_canonical_file() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real-tool");
        std::fs::write(&real, "#!/bin/sh\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(&real, bin.join("tool")).unwrap();
        std::fs::write(bin.join("other"), "").unwrap();
        let allow = AllowList::new([&real]).unwrap();
        let canonical = std::fs::canonicalize(&real).unwrap();
        let path = bin.as_os_str();
        assert_eq!(allow.resolve("tool", Some(path)), Ok(canonical.clone()));
        assert_eq!(
            allow.resolve(bin.join("tool").to_str().unwrap(), None),
            Ok(canonical)
        );
        for refused in ["other", "missing", "tool/..", ""] {
            assert_eq!(
                allow.resolve(refused, Some(path)),
                Err("executable_not_allowed"),
                "{refused}"
            );
        }
        // A bare name is never looked up in the current directory or without PATH.
        assert_eq!(allow.resolve("tool", None), Err("executable_not_allowed"));
        assert_eq!(
            AllowList::default().resolve("tool", Some(path)),
            Err("executable_not_allowed")
        );
        // Entries must be executable regular files.
        assert_eq!(
            AllowList::new([bin.join("other")]).unwrap_err().code(),
            "tasks_allow_invalid"
        );
        assert!(AllowList::new([tmp.path().join("nope")]).is_err());
        assert!(AllowList::new([&bin]).is_err());
    }
}
