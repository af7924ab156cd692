//! Managed tasks in the host's SQLite store (table `tasks`, schema 2): submit with idempotency, claim, finish,
//! and the recovery rule "a task `running` when its host stopped becomes `lost`, never re-run".
//!
//! One task server per data directory: [`TaskStore::open`] holds `<data dir>/tasks.lock` exclusively, so the
//! recovery at open never touches a live server's tasks.

use std::fs::File;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::ids::TaskId;
use crate::store::{Store, StoreConfig, StoreError, db, now_ms};
use crate::tasks::model::{TaskRecord, TaskRequest, TaskStatus};

/// File name of the lock a task server holds in the data directory.
pub const TASKS_LOCK_FILE: &str = "tasks.lock";

/// Why a submission was not accepted.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The idempotency key was used before with a different request (HTTP 409).
    #[error("the idempotency key was used for a different request (task {existing})")]
    Conflict {
        /// The task the key belongs to.
        existing: TaskId,
    },
    /// [`crate::tasks::TaskLimits::max_pending_tasks`] tasks are queued or running (HTTP 503).
    #[error("{limit} tasks are already queued or running")]
    QueueFull {
        /// The limit.
        limit: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SubmitError {
    /// Stable machine-readable code: `idempotency_key_conflict`, `task_queue_full`, or the store's code.
    pub fn code(&self) -> &'static str {
        match self {
            SubmitError::Conflict { .. } => "idempotency_key_conflict",
            SubmitError::QueueFull { .. } => "task_queue_full",
            SubmitError::Store(e) => e.code(),
        }
    }
}

/// What [`TaskStore::submit`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submission {
    /// A new task was stored (committed) as `queued` (HTTP 201).
    Created(TaskRecord),
    /// The key was used before with the same request: the existing task, as it is now (HTTP 200).
    Replayed(TaskRecord),
}

/// How a task ended, for [`TaskStore::finish`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskOutcome {
    /// A terminal status.
    pub status: TaskStatus,
    /// Exit code, when the program exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
    /// Kept stdout (the head).
    pub stdout: Vec<u8>,
    /// Kept stderr (the tail).
    pub stderr: Vec<u8>,
    /// Stdout was cut.
    pub stdout_truncated: bool,
    /// Stderr was cut.
    pub stderr_truncated: bool,
    /// Stable failure code, if any.
    pub error_code: Option<String>,
}

impl TaskOutcome {
    /// An outcome without a process: the worker refused or could not start the task.
    pub fn refused(code: &str) -> Self {
        Self {
            status: TaskStatus::Failed,
            exit_code: None,
            signal: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            error_code: Some(code.to_owned()),
        }
    }
}

/// The task table of one data directory, held by one task server at a time.
#[derive(Debug)]
pub struct TaskStore {
    conn: Connection,
    lost: Vec<TaskId>,
    _lock: File,
}

const SELECT: &str = "SELECT id, status, argv_json, timeout_seconds, exit_code, signal, stdout, stderr, \
     stdout_truncated, stderr_truncated, error_code, created_at_ms, started_at_ms, finished_at_ms FROM tasks";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawTask> {
    Ok(RawTask {
        id: r.get(0)?,
        status: r.get(1)?,
        argv_json: r.get(2)?,
        timeout_seconds: r.get(3)?,
        exit_code: r.get(4)?,
        signal: r.get(5)?,
        stdout: r.get(6)?,
        stderr: r.get(7)?,
        stdout_truncated: r.get(8)?,
        stderr_truncated: r.get(9)?,
        error_code: r.get(10)?,
        created_at_ms: r.get(11)?,
        started_at_ms: r.get(12)?,
        finished_at_ms: r.get(13)?,
    })
}

struct RawTask {
    id: String,
    status: String,
    argv_json: String,
    timeout_seconds: i64,
    exit_code: Option<i32>,
    signal: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    error_code: Option<String>,
    created_at_ms: i64,
    started_at_ms: Option<i64>,
    finished_at_ms: Option<i64>,
}

impl RawTask {
    fn into_record(self) -> Result<TaskRecord, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("task {}: {what}", self.id));
        Ok(TaskRecord {
            id: TaskId::parse(&self.id).map_err(|_| corrupt("invalid id"))?,
            status: TaskStatus::parse(&self.status).ok_or_else(|| corrupt("unknown status"))?,
            argv: serde_json::from_str(&self.argv_json).map_err(|_| corrupt("invalid argv"))?,
            timeout_seconds: u64::try_from(self.timeout_seconds)
                .map_err(|_| corrupt("invalid timeout"))?,
            exit_code: self.exit_code,
            signal: self.signal,
            stdout: self.stdout,
            stderr: self.stderr,
            stdout_truncated: self.stdout_truncated,
            stderr_truncated: self.stderr_truncated,
            error_code: self.error_code,
            created_at_ms: self.created_at_ms,
            started_at_ms: self.started_at_ms,
            finished_at_ms: self.finished_at_ms,
        })
    }
}

impl TaskStore {
    /// Opens the store of `data_dir` (creating and migrating it as [`Store::open`] does), takes the task server
    /// lock, and marks every `running` task `lost` (error `host_interrupted`): its host stopped, so its outcome
    /// is unknown, and it is never run again. `queued` tasks stay queued and run.
    ///
    /// # Errors
    /// [`StoreError::TasksBusy`] when another task server holds the lock; otherwise as [`Store::open`].
    pub fn open(data_dir: &Path) -> Result<TaskStore, StoreError> {
        Self::open_with(data_dir, StoreConfig::default())
    }

    /// [`TaskStore::open`] with a store configuration.
    ///
    /// # Errors
    /// As [`TaskStore::open`].
    pub fn open_with(data_dir: &Path, config: StoreConfig) -> Result<TaskStore, StoreError> {
        let store = Store::open_with(data_dir, config)?;
        let lock_path: PathBuf = data_dir.join(TASKS_LOCK_FILE);
        let io = |source| StoreError::Io {
            path: lock_path.clone(),
            source,
        };
        let mut options = File::options();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            // Private like every other file of the data dir.
            options.mode(0o600);
        }
        let lock = options.open(&lock_path).map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(StoreError::TasksBusy),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let mut tasks = TaskStore {
            conn: store.into_connection(),
            lost: Vec::new(),
            _lock: lock,
        };
        tasks.recover_lost()?;
        Ok(tasks)
    }

    /// Tasks this open found `running` and marked `lost`.
    pub fn lost_tasks(&self) -> &[TaskId] {
        &self.lost
    }

    fn recover_lost(&mut self) -> Result<(), StoreError> {
        let tx = self.write_tx("recovering lost tasks")?;
        let ids: Vec<String> = {
            let mut stmt = tx
                .prepare("SELECT id FROM tasks WHERE status = 'running' ORDER BY seq")
                .map_err(db("recovering lost tasks"))?;
            let rows = stmt
                .query_map([], |r| r.get(0))
                .map_err(db("recovering lost tasks"))?;
            rows.collect::<Result<_, _>>()
                .map_err(db("recovering lost tasks"))?
        };
        tx.execute(
            "UPDATE tasks SET status='lost', error_code='host_interrupted', finished_at_ms=?1
             WHERE status='running'",
            params![now_ms()],
        )
        .map_err(db("recovering lost tasks"))?;
        tx.commit().map_err(db("recovering lost tasks"))?;
        self.lost = ids.iter().filter_map(|id| TaskId::parse(id).ok()).collect();
        Ok(())
    }

    fn write_tx(&mut self, op: &'static str) -> Result<rusqlite::Transaction<'_>, StoreError> {
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db(op))
    }

    /// Stores `request` under `key` as a `queued` task, or returns the task the key already names.
    ///
    /// One transaction: the key is looked up; the same fingerprint replays the task
    /// ([`Submission::Replayed`]); another is [`SubmitError::Conflict`]; otherwise, unless `max_pending` tasks
    /// are queued or running ([`SubmitError::QueueFull`]), a new row is committed before this returns.
    ///
    /// # Errors
    /// [`SubmitError`].
    pub fn submit(
        &mut self,
        key: &str,
        request: &TaskRequest,
        max_pending: u64,
    ) -> Result<Submission, SubmitError> {
        let fingerprint = request.fingerprint();
        let id = TaskId::random().map_err(StoreError::from)?;
        let argv_json = serde_json::to_string(&request.argv)
            .map_err(|e| StoreError::Corrupt(format!("argv not serializable: {e}")))?;
        let timeout = i64::try_from(request.timeout_seconds).unwrap_or(i64::MAX);
        let tx = self.write_tx("submitting a task")?;
        let existing: Option<(String, String)> = tx
            .query_row(
                "SELECT id, request_sha256 FROM tasks WHERE idempotency_key = ?1",
                params![key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db("looking up an idempotency key"))?;
        if let Some((existing, sha)) = existing {
            let existing = TaskId::parse(&existing)
                .map_err(|_| StoreError::Corrupt(format!("invalid task id {existing:?}")))?;
            if sha != fingerprint {
                return Err(SubmitError::Conflict { existing });
            }
            let record = get_in(&tx, &existing)?
                .ok_or_else(|| StoreError::Corrupt("replayed task vanished".into()))?;
            tx.commit().map_err(db("looking up an idempotency key"))?;
            return Ok(Submission::Replayed(record));
        }
        let pending: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM tasks WHERE status IN ('queued','running')",
                [],
                |r| r.get(0),
            )
            .map_err(db("counting pending tasks"))?;
        if u64::try_from(pending).unwrap_or(0) >= max_pending {
            return Err(SubmitError::QueueFull { limit: max_pending });
        }
        tx.execute(
            "INSERT INTO tasks (id, idempotency_key, request_sha256, argv_json, timeout_seconds, status,
                created_at_ms, seq)
             VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, (SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks))",
            params![id.as_str(), key, fingerprint, argv_json, timeout, now_ms()],
        )
        .map_err(db("storing a task"))?;
        let record =
            get_in(&tx, &id)?.ok_or_else(|| StoreError::Corrupt("new task vanished".into()))?;
        tx.commit().map_err(db("storing a task"))?;
        Ok(Submission::Created(record))
    }

    /// The task `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn get(&self, id: &TaskId) -> Result<Option<TaskRecord>, StoreError> {
        get_in(&self.conn, id)
    }

    /// Takes the oldest `queued` task and marks it `running` (committed), or `None` when none is queued.
    ///
    /// # Errors
    /// [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn claim_next(&mut self) -> Result<Option<TaskRecord>, StoreError> {
        let tx = self.write_tx("claiming a task")?;
        let id: Option<String> = tx
            .query_row(
                "SELECT id FROM tasks WHERE status='queued' ORDER BY seq LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("claiming a task"))?;
        let Some(id) = id else {
            return Ok(None);
        };
        let id = TaskId::parse(&id)
            .map_err(|_| StoreError::Corrupt(format!("invalid task id {id:?}")))?;
        tx.execute(
            "UPDATE tasks SET status='running', started_at_ms=?2 WHERE id=?1",
            params![id.as_str(), now_ms()],
        )
        .map_err(db("claiming a task"))?;
        let record = get_in(&tx, &id)?;
        tx.commit().map_err(db("claiming a task"))?;
        Ok(record)
    }

    /// Records how a `running` task ended (one transaction). A task no longer `running` is left alone.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn finish(&mut self, id: &TaskId, outcome: &TaskOutcome) -> Result<(), StoreError> {
        let tx = self.write_tx("finishing a task")?;
        tx.execute(
            "UPDATE tasks SET status=?2, exit_code=?3, signal=?4, stdout=?5, stderr=?6, stdout_truncated=?7,
                stderr_truncated=?8, error_code=?9, finished_at_ms=?10
             WHERE id=?1 AND status='running'",
            params![
                id.as_str(),
                outcome.status.as_str(),
                outcome.exit_code,
                outcome.signal,
                outcome.stdout,
                outcome.stderr,
                outcome.stdout_truncated,
                outcome.stderr_truncated,
                outcome.error_code,
                now_ms()
            ],
        )
        .map_err(db("finishing a task"))?;
        tx.commit().map_err(db("finishing a task"))?;
        Ok(())
    }
}

fn get_in(conn: &Connection, id: &TaskId) -> Result<Option<TaskRecord>, StoreError> {
    conn.query_row(
        &format!("{SELECT} WHERE id = ?1"),
        params![id.as_str()],
        row,
    )
    .optional()
    .map_err(db("reading a task"))?
    .map(RawTask::into_record)
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(argv: &[&str]) -> TaskRequest {
        TaskRequest {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            timeout_seconds: 60,
        }
    }

    fn created(s: Result<Submission, SubmitError>) -> TaskRecord {
        match s {
            Ok(Submission::Created(t)) => t,
            other => panic!("expected a new task, got {other:?}"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_task_lock_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let _store = TaskStore::open(tmp.path()).unwrap();
        let mode = std::fs::metadata(tmp.path().join(TASKS_LOCK_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }

    #[test]
    fn the_same_key_replays_and_a_different_request_conflicts() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = TaskStore::open(tmp.path()).unwrap();
        let first = created(store.submit("k1", &request(&["echo", "a"]), 10));
        assert_eq!(first.status, TaskStatus::Queued);
        match store.submit("k1", &request(&["echo", "a"]), 10) {
            Ok(Submission::Replayed(t)) => assert_eq!(t.id, first.id),
            other => panic!("{other:?}"),
        }
        let err = store
            .submit("k1", &request(&["echo", "b"]), 10)
            .unwrap_err();
        assert_eq!(err.code(), "idempotency_key_conflict");
        let second = created(store.submit("k2", &request(&["echo", "a"]), 10));
        assert_ne!(second.id, first.id);
    }

    #[test]
    fn pending_tasks_are_bounded_at_the_limit_and_one_past_it() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = TaskStore::open(tmp.path()).unwrap();
        created(store.submit("a", &request(&["x"]), 2));
        created(store.submit("b", &request(&["x"]), 2));
        let err = store.submit("c", &request(&["x"]), 2).unwrap_err();
        assert_eq!(err.code(), "task_queue_full");
        // A replay is not a new task: still answered when the queue is full.
        assert!(matches!(
            store.submit("a", &request(&["x"]), 2),
            Ok(Submission::Replayed(_))
        ));
        // A finished task frees its place.
        let claimed = store.claim_next().unwrap().unwrap();
        store
            .finish(&claimed.id, &TaskOutcome::refused("executable_not_allowed"))
            .unwrap();
        created(store.submit("c", &request(&["x"]), 2));
    }

    #[test]
    fn claims_go_oldest_first_and_finish_is_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = TaskStore::open(tmp.path()).unwrap();
        let a = created(store.submit("a", &request(&["a"]), 10));
        let b = created(store.submit("b", &request(&["b"]), 10));
        let first = store.claim_next().unwrap().unwrap();
        assert_eq!(
            (first.id.clone(), first.status),
            (a.id, TaskStatus::Running)
        );
        assert!(first.started_at_ms.is_some());
        let outcome = TaskOutcome {
            status: TaskStatus::Succeeded,
            exit_code: Some(0),
            signal: None,
            stdout: b"out\xff".to_vec(),
            stderr: b"err".to_vec(),
            stdout_truncated: true,
            stderr_truncated: false,
            error_code: None,
        };
        store.finish(&first.id, &outcome).unwrap();
        let done = store.get(&first.id).unwrap().unwrap();
        assert_eq!(done.status, TaskStatus::Succeeded);
        assert_eq!(done.stdout, b"out\xff");
        assert!(done.stdout_truncated && done.finished_at_ms.is_some());
        let view = done.to_json();
        assert_eq!(view["stdout"], "out\u{fffd}");
        assert_eq!(view["exit_code"], 0);
        // Finishing twice changes nothing.
        store
            .finish(&first.id, &TaskOutcome::refused("late"))
            .unwrap();
        assert_eq!(
            store.get(&first.id).unwrap().unwrap().status,
            TaskStatus::Succeeded
        );
        assert_eq!(store.claim_next().unwrap().unwrap().id, b.id);
        assert_eq!(store.claim_next().unwrap(), None);
    }

    #[test]
    fn a_running_task_becomes_lost_at_the_next_open_and_queued_ones_stay_queued() {
        let tmp = tempfile::tempdir().unwrap();
        let (running, queued) = {
            let mut store = TaskStore::open(tmp.path()).unwrap();
            let running = created(store.submit("a", &request(&["a"]), 10));
            let queued = created(store.submit("b", &request(&["b"]), 10));
            assert_eq!(store.claim_next().unwrap().unwrap().id, running.id);
            (running.id, queued.id)
            // The store is dropped here with the task still `running`: its host "died".
        };
        let mut store = TaskStore::open(tmp.path()).unwrap();
        assert_eq!(store.lost_tasks(), std::slice::from_ref(&running));
        let lost = store.get(&running).unwrap().unwrap();
        assert_eq!(lost.status, TaskStatus::Lost);
        assert_eq!(lost.error_code.as_deref(), Some("host_interrupted"));
        // Never re-run: the next claim is the queued one, then nothing.
        assert_eq!(store.claim_next().unwrap().unwrap().id, queued);
        assert_eq!(store.claim_next().unwrap(), None);
    }

    #[test]
    fn a_second_task_server_on_the_same_data_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let first = TaskStore::open(tmp.path()).unwrap();
        let err = TaskStore::open(tmp.path()).unwrap_err();
        assert_eq!(err.code(), "tasks_busy");
        drop(first);
        TaskStore::open(tmp.path()).unwrap();
    }
}
