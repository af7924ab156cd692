//! The host's SQLite store: threads, messages, runs and native session ids (invariant 10, "Nothing is lost").
//!
//! Every write is one transaction, so a crash never leaves a half-written row. A running turn holds an exclusive
//! file lock (`<data dir>/runs/<run id>.lock`); [`Store::open`] marks every `running` run whose lock is free as
//! `interrupted`, so a host killed mid-turn leaves a recoverable run and a concurrent host's live turn is left alone.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::ids::{IdError, RunId, ThreadId};

/// Schema version written to `PRAGMA user_version` by [`migrate`].
pub const SCHEMA_VERSION: u32 = 6;

/// Marks run `?1` (still `running`) `interrupted` at `?2` ms, with the reason `threads show` prints as `why:`.
const MARK_INTERRUPTED: &str = "UPDATE runs SET status='interrupted', ended_at_ms=?2, error_code='host_interrupted',
     error_reason='the awp-host running this turn ended before the turn did (killed, crashed or the machine \
stopped) and its agent is gone too; the thread takes turns again'
     WHERE id=?1 AND status='running'";

/// File name of the database inside the data directory.
pub const DATABASE_FILE: &str = "awp-host.sqlite3";

/// Tuning of the store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// How long a write waits for another connection's lock before failing with [`StoreError::Database`].
    /// Default 5 s.
    pub busy_timeout: Duration,
    /// Maximum thread title length in characters; the first prompt line is cut there (with `…`). Default 80.
    pub max_title_chars: usize,
    /// When a commit reaches the disk. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            max_title_chars: 80,
            synchronous: Synchronous::Full,
        }
    }
}

/// SQLite's `PRAGMA synchronous` in WAL mode: what a committed write survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// `FULL`: every commit is fsynced before it returns; survives a host crash and a power loss.
    Full,
    /// `NORMAL`: commits reach the OS at once and the disk at checkpoints; survives a host crash (the
    /// invariant-10 case), a power loss may lose the last commits. Faster per commit.
    Normal,
}

/// A database failure (opaque; the message names the operation).
#[derive(Debug)]
pub struct DatabaseError(rusqlite::Error);

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DatabaseError {}

/// Failures of the store.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Preparing the data directory or a run lock file failed.
    #[error("store file error at {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The IO failure.
        #[source]
        source: std::io::Error,
    },
    /// SQLite reported an error.
    #[error("database error while {operation}")]
    Database {
        /// What the store was doing.
        operation: &'static str,
        /// The SQLite error.
        #[source]
        source: DatabaseError,
    },
    /// The database was written by a newer awp-host.
    #[error("store schema version {found} is newer than this awp-host supports ({supported})")]
    SchemaTooNew {
        /// `PRAGMA user_version` found.
        found: u32,
        /// [`SCHEMA_VERSION`].
        supported: u32,
    },
    /// No thread has this id.
    #[error("thread {0} not found")]
    ThreadNotFound(ThreadId),
    /// The thread has a live running run (its lock file is held by another turn, or the turn's host died and
    /// left its agent running): a second turn would resume the same native session concurrently.
    #[error("thread {thread} is busy: run {run} {}", busy_detail(*.orphan_agent_pid))]
    ThreadBusy {
        /// The thread.
        thread: ThreadId,
        /// Its live run.
        run: RunId,
        /// When the run's host is gone but its agent still runs: the agent's pid (= its process group id,
        /// `runs.agent_pid`). The message says how to end it. `None` while a live host holds the run.
        orphan_agent_pid: Option<u32>,
    },
    /// No thread id starts with this prefix (see [`Store::resolve_thread`]).
    #[error("no thread id starts with {0}")]
    ThreadPrefixNotFound(String),
    /// More than one thread id starts with this prefix (see [`Store::resolve_thread`]).
    #[error("thread id prefix {prefix} is ambiguous: {} match ({}{})", .count, candidate_list(.candidates), if *.count as usize > .candidates.len() { ", …" } else { "" })]
    ThreadAmbiguous {
        /// The prefix as given.
        prefix: String,
        /// The first matches, most recently updated first (at most [`MAX_PREFIX_CANDIDATES`]).
        candidates: Vec<ThreadId>,
        /// How many threads match in all.
        count: u64,
    },
    /// The store holds no thread (`chat --continue` with nothing to continue).
    #[error("there is no thread to continue yet")]
    NoThreads,
    /// A thread title given by the user is empty, too long or holds control characters.
    #[error("invalid thread title: {0}")]
    InvalidTitle(String),
    /// Another task server (`awp-host serve --tasks-listen`) holds this data directory's `tasks.lock`.
    #[error("another task server is using this data directory")]
    TasksBusy,
    /// The blocking thread running a store call ended without an answer (a panic or a runtime shutdown).
    #[error("the store call did not complete")]
    Unavailable,
    /// A stored row holds a value this version cannot read.
    #[error("corrupt store row: {0}")]
    Corrupt(String),
    /// An id could not be generated.
    #[error(transparent)]
    Id(#[from] IdError),
}

impl StoreError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Io { .. } => "store_io",
            StoreError::Database { .. } => "store_database",
            StoreError::SchemaTooNew { .. } => "store_schema_too_new",
            StoreError::ThreadNotFound(_) => "thread_not_found",
            StoreError::ThreadBusy { .. } => "thread_busy",
            StoreError::ThreadPrefixNotFound(_) => "thread_not_found",
            StoreError::ThreadAmbiguous { .. } => "thread_ambiguous",
            StoreError::NoThreads => "no_threads",
            StoreError::InvalidTitle(_) => "invalid_title",
            StoreError::TasksBusy => "tasks_busy",
            StoreError::Unavailable => "store_unavailable",
            StoreError::Corrupt(_) => "store_corrupt",
            StoreError::Id(e) => e.code(),
        }
    }
}

/// The candidates of [`StoreError::ThreadAmbiguous`], comma-separated.
fn candidate_list(ids: &[ThreadId]) -> String {
    ids.iter()
        .map(ThreadId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn db(operation: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| StoreError::Database {
        operation,
        source: DatabaseError(e),
    }
}

/// Lifecycle of a run (one turn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    /// The turn is in progress (or its host died; see [`RunStatus::Interrupted`]).
    Running,
    /// The agent completed the turn successfully.
    Succeeded,
    /// The turn failed (agent error result, exit mid-turn, protocol violation, spawn failure).
    Failed,
    /// The user cancelled the turn.
    Cancelled,
    /// The host stopped mid-turn; found by the next [`Store::open`].
    Interrupted,
}

impl RunStatus {
    /// The stored and serialized name: `running | succeeded | failed | cancelled | interrupted`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            "interrupted" => RunStatus::Interrupted,
            other => return Err(StoreError::Corrupt(format!("unknown run status {other:?}"))),
        })
    }
}

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The prompt.
    User,
    /// Assistant text.
    Assistant,
    /// A one-line tool use / tool result summary.
    Tool,
}

impl Role {
    /// The stored name: `user | assistant | tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "unknown message role {other:?}"
                )));
            }
        })
    }
}

/// Token usage of a run, as reported by the agent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-read input tokens, when reported.
    pub cache_read_input_tokens: Option<u64>,
    /// Cache-creation input tokens, when reported.
    pub cache_creation_input_tokens: Option<u64>,
}

/// A stored thread.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRecord {
    /// Id.
    pub id: ThreadId,
    /// Name of the agent the thread talks to.
    pub agent: String,
    /// First prompt line, bounded by [`StoreConfig::max_title_chars`].
    pub title: String,
    /// The agent's current native session id (the `--resume` value of the next turn).
    pub session_id: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Last change, milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
    /// Number of runs.
    pub run_count: u64,
    /// The directory the thread's agent runs in (absolute, UTF-8), recorded when the thread was created; `None`
    /// for threads created before schema 3 (their turns run where the host runs).
    pub cwd: Option<String>,
    /// The directory [`cwd`](Self::cwd) named when the thread was created: its `(device, inode)` (`stat` of the
    /// path, links followed). `None` for a thread created before schema 6, or whose directory could not be
    /// inspected then.
    pub cwd_identity: Option<(u64, u64)>,
    /// Status of the thread's latest run (by start time); `None` for a thread without runs.
    pub last_run_status: Option<RunStatus>,
}

/// A stored message.
#[derive(Clone, Debug, PartialEq)]
pub struct MessageRecord {
    /// Row id (ordering key).
    pub id: i64,
    /// The run that produced it.
    pub run_id: RunId,
    /// Author.
    pub role: Role,
    /// Text (for [`Role::Tool`] a bounded one-line summary).
    pub content: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
}

/// A stored run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// Id.
    pub id: RunId,
    /// Thread.
    pub thread_id: ThreadId,
    /// Agent name.
    pub agent: String,
    /// Model requested, if any.
    pub model: Option<String>,
    /// Status.
    pub status: RunStatus,
    /// Start, milliseconds since the Unix epoch.
    pub started_at_ms: i64,
    /// End, milliseconds since the Unix epoch (None while running).
    pub ended_at_ms: Option<i64>,
    /// Session id passed as `--resume`, if any.
    pub resumed_session_id: Option<String>,
    /// Session id the agent reported during this run.
    pub session_id: Option<String>,
    /// Usage.
    pub usage: Option<RunUsage>,
    /// Stable failure code (`agent_exited_mid_turn`, `cancelled`, …).
    pub error_code: Option<String>,
    /// Why the run failed in the agent's own words (see [`RunEnd::error_reason`]); `None` for runs before
    /// schema 3.
    pub error_reason: Option<String>,
    /// Agent-reported cost in USD, if any.
    pub total_cost_usd: Option<f64>,
}

/// One entry of a thread's session id history.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRecord {
    /// The native session id.
    pub session_id: String,
    /// The run that first reported it.
    pub run_id: RunId,
    /// When it was first reported, milliseconds since the Unix epoch.
    pub first_seen_at_ms: i64,
}

/// A thread with everything stored for it.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadDetail {
    /// The thread.
    pub thread: ThreadRecord,
    /// Messages, oldest first.
    pub messages: Vec<MessageRecord>,
    /// Runs, oldest first.
    pub runs: Vec<RunRecord>,
    /// Every session id ever reported, oldest first (the last one is the current one).
    pub sessions: Vec<SessionRecord>,
}

/// Which thread a new run belongs to.
#[derive(Clone, Debug)]
pub enum ThreadChoice {
    /// Create a thread for this agent.
    New {
        /// Agent name.
        agent: String,
    },
    /// Continue an existing thread.
    Existing(ThreadId),
}

/// What [`Store::begin_run`] records.
#[derive(Clone, Debug)]
pub struct NewRun<'a> {
    /// Thread to use or create.
    pub thread: ThreadChoice,
    /// Agent name recorded on the run.
    pub agent: &'a str,
    /// Model requested, if any.
    pub model: Option<&'a str>,
    /// The user message text (stored verbatim, also the title source of a new thread).
    pub prompt: &'a str,
    /// The session id the agent is resumed with, if any.
    pub resumed_session_id: Option<&'a str>,
    /// Title of a new thread (bounded like a prompt title); `None` derives it from `prompt`. Ignored for an
    /// existing thread.
    pub title: Option<&'a str>,
    /// Working directory recorded on a new thread ([`ThreadRecord::cwd`]; its device and inode are recorded with
    /// it, [`ThreadRecord::cwd_identity`]). Ignored for an existing thread.
    pub cwd: Option<&'a str>,
}

/// A run in progress: holds the run's lock file until dropped or [`Store::finish_run`].
#[derive(Debug)]
pub struct RunGuard {
    /// Thread id.
    pub thread_id: ThreadId,
    /// Run id.
    pub run_id: RunId,
    lock: Option<(File, PathBuf)>,
}

impl RunGuard {
    fn release(&mut self) {
        if let Some((file, path)) = self.lock.take() {
            // Remove before unlocking so that a concurrent opener never finds a free lock of a live run.
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "could not remove run lock file");
            }
            drop(file);
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.release();
    }
}

/// Assistant text not yet stored when a run ends; [`Store::finish_run`] writes it in the same transaction.
#[derive(Clone, Debug)]
pub struct PendingText {
    /// The assistant message to append to (`None` starts one).
    pub message: Option<i64>,
    /// The text.
    pub text: String,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunEnd {
    /// Final status (not [`RunStatus::Running`]).
    pub status: RunStatus,
    /// Usage, if reported.
    pub usage: Option<RunUsage>,
    /// Stable failure code, if any.
    pub error_code: Option<String>,
    /// Why it failed, in the agent's words: a bounded, escaped one-line text (the turn runner's
    /// `failure_reason`). Stored as given.
    pub error_reason: Option<String>,
    /// Cost, if reported.
    pub total_cost_usd: Option<f64>,
    /// Assistant text still pending, stored with the end (saves a commit per turn).
    pub pending_text: Option<PendingText>,
}

/// What [`Store::record_session_id`] changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionChange {
    /// The thread's session id before (None for a first turn).
    pub previous: Option<String>,
    /// Whether the id differs from the previous one.
    pub changed: bool,
}

/// The SQLite store of one data directory.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    locks_dir: PathBuf,
    config: StoreConfig,
    recovered: Vec<RunId>,
}

/// Sets `path` to mode 0600 when it is a regular file with another mode; nothing when it does not exist.
#[cfg(unix)]
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o777 != 0o600 => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Switches `conn` to WAL and returns the journal mode now in effect. SQLite answers `SQLITE_BUSY` at once (no
/// busy handler) when another connection is switching a fresh database at the same time, so a busy answer is
/// retried every 10 ms until `busy_timeout` has passed.
fn enable_wal(conn: &Connection, busy_timeout: Duration) -> Result<String, StoreError> {
    let started = std::time::Instant::now();
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && started.elapsed() < busy_timeout =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other.map_err(db("enabling WAL")),
        }
    }
}

/// The end of [`StoreError::ThreadBusy`]'s message.
fn busy_detail(orphan_agent_pid: Option<u32>) -> String {
    match orphan_agent_pid {
        None => "is still running".to_owned(),
        Some(pid) => format!(
            "was left running by an awp-host that exited, and its agent (pid {pid}, process group {pid}) still \
             runs; end it with `kill -TERM -- -{pid}` (`kill -KILL -- -{pid}` if it stays) and the thread takes \
             turns again"
        ),
    }
}

/// What keeps a `running` run alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunHolder {
    /// Nothing: the run is orphaned (its host and agent are gone).
    Nobody,
    /// A live turn holds its lock file.
    Host,
    /// No host, but the agent process group (pid = pgid) recorded on the run has a live member.
    OrphanAgent(i64),
}

impl RunHolder {
    /// [`StoreError::ThreadBusy`] for `run` of `thread` held by this (`None` for [`RunHolder::Nobody`]).
    pub(crate) fn busy(self, thread: ThreadId, run: RunId) -> Option<StoreError> {
        let orphan_agent_pid = match self {
            RunHolder::Nobody => return None,
            RunHolder::Host => None,
            RunHolder::OrphanAgent(pid) => u32::try_from(pid).ok(),
        };
        Some(StoreError::ThreadBusy {
            thread,
            run,
            orphan_agent_pid,
        })
    }
}

/// True when no live turn holds `run`'s lock file in `locks_dir` (a stale free lock file is removed) and the
/// agent process group recorded on the run (`runs.agent_pid`, see `Store::record_agent_pid`) has no live member:
/// a host killed with its agent still running leaves the thread busy until that agent is gone.
fn run_orphaned(conn: &Connection, locks_dir: &Path, run: &RunId) -> Result<bool, StoreError> {
    Ok(run_holder(conn, locks_dir, run)? == RunHolder::Nobody)
}

/// What keeps `run` alive ([`run_orphaned`] says whether anything does).
pub(crate) fn run_holder(
    conn: &Connection,
    locks_dir: &Path,
    run: &RunId,
) -> Result<RunHolder, StoreError> {
    if !run_lock_free(locks_dir, run)? {
        return Ok(RunHolder::Host);
    }
    let pid: Option<i64> = conn
        .query_row(
            "SELECT agent_pid FROM runs WHERE id=?1",
            params![run.as_str()],
            |r| r.get(0),
        )
        .optional()
        .map_err(db("checking a run's agent"))?
        .flatten();
    Ok(match pid {
        Some(pid) if manage::agent_group_alive(pid) => RunHolder::OrphanAgent(pid),
        _ => RunHolder::Nobody,
    })
}

/// True when no live turn holds `run`'s lock file in `locks_dir` (a stale free lock file is removed).
fn run_lock_free(locks_dir: &Path, run: &RunId) -> Result<bool, StoreError> {
    let path = locks_dir.join(format!("{run}.lock"));
    match File::options().read(true).write(true).open(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(StoreError::Io { path, source: e }),
        Ok(file) => match file.try_lock() {
            Ok(()) => {
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "could not remove stale run lock");
                }
                Ok(true)
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Io { path, source: e }),
        },
    }
}

/// Brings the schema of `conn` to [`SCHEMA_VERSION`] in one `BEGIN IMMEDIATE` transaction that reads
/// `user_version` itself, so concurrent openers of a fresh database migrate it exactly once (the others wait for
/// the write lock, up to the busy timeout, then find the schema current).
///
/// # Errors
/// [`StoreError::SchemaTooNew`] for a database from a newer version; [`StoreError::Database`] otherwise.
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    // Fast path without the write lock: a current schema needs nothing.
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db("reading the schema version"))?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db("migrating"))?;
    let version: u32 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db("reading the schema version"))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version == SCHEMA_VERSION {
        // Nothing to change; ending the transaction without writes.
        tx.commit().map_err(db("reading the schema version"))?;
        return Ok(());
    }
    if version < 1 {
        tx.execute_batch(
            "CREATE TABLE threads (
                id TEXT PRIMARY KEY NOT NULL,
                agent TEXT NOT NULL,
                title TEXT NOT NULL,
                session_id TEXT,
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL
            ) STRICT;
            CREATE TABLE runs (
                id TEXT PRIMARY KEY NOT NULL,
                thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
                agent TEXT NOT NULL,
                model TEXT,
                status TEXT NOT NULL
                    CHECK (status IN ('running','succeeded','failed','cancelled','interrupted')),
                started_at_ms INTEGER NOT NULL,
                ended_at_ms INTEGER,
                resumed_session_id TEXT,
                session_id TEXT,
                input_tokens INTEGER,
                output_tokens INTEGER,
                cache_read_input_tokens INTEGER,
                cache_creation_input_tokens INTEGER,
                total_cost_usd REAL,
                error_code TEXT
            ) STRICT;
            CREATE INDEX runs_thread ON runs(thread_id, started_at_ms);
            CREATE INDEX runs_status ON runs(status);
            CREATE TABLE messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
                run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
                role TEXT NOT NULL CHECK (role IN ('user','assistant','tool')),
                content TEXT NOT NULL,
                created_at_ms INTEGER NOT NULL
            ) STRICT;
            CREATE INDEX messages_thread ON messages(thread_id, id);
            CREATE TABLE sessions (
                thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
                session_id TEXT NOT NULL,
                run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
                first_seen_at_ms INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                PRIMARY KEY (thread_id, session_id)
            ) STRICT;
            PRAGMA user_version = 1;",
        )
        .map_err(db("migrating to schema 1"))?;
    }
    if version < 2 {
        // Managed tasks (crate::tasks): one row per accepted task, durable before the API answers 201.
        tx.execute_batch(
            "CREATE TABLE tasks (
                id TEXT PRIMARY KEY NOT NULL,
                idempotency_key TEXT NOT NULL UNIQUE,
                request_sha256 TEXT NOT NULL,
                argv_json TEXT NOT NULL,
                timeout_seconds INTEGER NOT NULL,
                status TEXT NOT NULL
                    CHECK (status IN ('queued','running','succeeded','failed','timed_out','lost')),
                exit_code INTEGER,
                signal INTEGER,
                stdout BLOB NOT NULL DEFAULT x'',
                stderr BLOB NOT NULL DEFAULT x'',
                stdout_truncated INTEGER NOT NULL DEFAULT 0,
                stderr_truncated INTEGER NOT NULL DEFAULT 0,
                error_code TEXT,
                created_at_ms INTEGER NOT NULL,
                started_at_ms INTEGER,
                finished_at_ms INTEGER,
                seq INTEGER NOT NULL
            ) STRICT;
            CREATE INDEX tasks_queue ON tasks(status, seq);
            PRAGMA user_version = 2;",
        )
        .map_err(db("migrating to schema 2"))?;
    }
    if version < 3 {
        // Threads remember where they run (the agent's working directory), runs why they failed (the agent's
        // own words); older rows have neither.
        tx.execute_batch(
            "ALTER TABLE threads ADD COLUMN cwd TEXT;
             ALTER TABLE runs ADD COLUMN error_reason TEXT;
             PRAGMA user_version = 3;",
        )
        .map_err(db("migrating to schema 3"))?;
    }
    if version < 4 {
        // The agent's pid (= its process group id) of a run: a host that died leaves the thread busy while that
        // group lives.
        tx.execute_batch(
            "ALTER TABLE runs ADD COLUMN agent_pid INTEGER;
             PRAGMA user_version = 4;",
        )
        .map_err(db("migrating to schema 4"))?;
    }
    if version < 5 {
        // Providers and their models (crate::providers). Credentials are not here: they live in a separate 0600
        // file read only by the provider runtime. `default_config` is the model's public configuration before
        // the user changed it, `user_config` the user's (NULL until `models.setPublicConfig`).
        tx.execute_batch(
            "CREATE TABLE providers (
                id TEXT PRIMARY KEY NOT NULL,
                name TEXT NOT NULL,
                api_type TEXT NOT NULL,
                base_url TEXT,
                enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
                custom INTEGER NOT NULL CHECK (custom IN (0, 1)),
                created_at_ms INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL
            ) STRICT;
            CREATE UNIQUE INDEX providers_name ON providers(name);
            CREATE TABLE provider_models (
                provider_id TEXT NOT NULL REFERENCES providers(id) ON DELETE CASCADE,
                model_id TEXT NOT NULL,
                name TEXT NOT NULL,
                enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
                custom INTEGER NOT NULL CHECK (custom IN (0, 1)),
                default_config TEXT NOT NULL,
                user_config TEXT,
                created_at_ms INTEGER NOT NULL,
                PRIMARY KEY (provider_id, model_id)
            ) STRICT;
            PRAGMA user_version = 5;",
        )
        .map_err(db("migrating to schema 5"))?;
    }
    if version < 6 {
        // Which directory a thread's `cwd` named when it was created (device and inode): a path that now leads
        // elsewhere (replaced by a link, or by another directory) is refused instead of moving the thread.
        tx.execute_batch(
            "ALTER TABLE threads ADD COLUMN cwd_dev INTEGER;
             ALTER TABLE threads ADD COLUMN cwd_ino INTEGER;
             PRAGMA user_version = 6;",
        )
        .map_err(db("migrating to schema 6"))?;
    }
    tx.commit().map_err(db("migrating"))?;
    Ok(())
}

/// `(device, inode)` of the directory at `path` (links followed); `None` when it cannot be inspected.
pub fn dir_identity(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Cuts the first non-empty line of `prompt` to `max_chars` characters (appending `…` when cut).
pub fn title_from_prompt(prompt: &str, max_chars: usize) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    bounded_line(line, max_chars)
}

/// `text` made safe for a terminal: C0/C1 control characters and DEL (except `\n` and `\t` when `single_line` is
/// false), bidirectional-text controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and the line/paragraph
/// separators U+2028/U+2029 become visible escapes such as `\u{1b}`. Borrowed when nothing needs escaping. For
/// human output only: JSON output keeps the exact text.
pub fn escape_controls(text: &str, single_line: bool) -> std::borrow::Cow<'_, str> {
    let needs = |c: char| {
        let kept = !single_line && (c == '\n' || c == '\t');
        (c.is_control() && !kept)
            || matches!(
                c,
                '\u{61c}'
                    | '\u{200e}'
                    | '\u{200f}'
                    | '\u{202a}'..='\u{202e}'
                    | '\u{2066}'..='\u{2069}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
    };
    if !text.chars().any(needs) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with control characters replaced by spaces, cut to at most `max_chars` characters (the last one `…`
/// when cut).
pub fn bounded_line(text: &str, max_chars: usize) -> String {
    let clean = |c: char| if c.is_control() { ' ' } else { c };
    if text.chars().count() <= max_chars {
        return text.chars().map(clean).collect();
    }
    let mut out: String = text
        .chars()
        .take(max_chars.saturating_sub(1))
        .map(clean)
        .collect();
    if max_chars > 0 {
        out.push('…');
    }
    out
}

impl Store {
    /// Opens (creating if needed) the store in `data_dir` with default configuration.
    ///
    /// # Errors
    /// See [`Store::open_with`].
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(data_dir, StoreConfig::default())
    }

    /// Opens (creating if needed) the store in `data_dir`: directory 0700, WAL, `foreign_keys=ON`,
    /// `synchronous` as configured (default FULL), busy timeout, migrations, then marks orphaned `running` runs `interrupted`
    /// (see [`Store::recovered_runs`]).
    ///
    /// # Errors
    /// [`StoreError::Io`] when the directory cannot be prepared, [`StoreError::SchemaTooNew`],
    /// [`StoreError::Database`].
    pub fn open_with(data_dir: &Path, config: StoreConfig) -> Result<Store, StoreError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        crate::paths::create_private_dir(data_dir).map_err(|e| match e {
            crate::paths::PathError::Prepare { path, source } => StoreError::Io { path, source },
            other => StoreError::Io {
                path: data_dir.to_path_buf(),
                source: std::io::Error::other(other.to_string()),
            },
        })?;
        let locks_dir = data_dir.join("runs");
        crate::paths::create_private_dir(&locks_dir)
            .map_err(|e| io(&locks_dir)(std::io::Error::other(e.to_string())))?;
        let path = data_dir.join(DATABASE_FILE);
        // A database, `-wal` or `-shm` file left read-only (by hand, or created with the mode of a read-only
        // database during a failed write) would make every later write fail: all three are made 0600 before
        // SQLite opens them. A file we cannot change (another owner) is a typed error naming it.
        #[cfg(unix)]
        for suffix in ["", "-wal", "-shm"] {
            let file = data_dir.join(format!("{DATABASE_FILE}{suffix}"));
            make_private(&file).map_err(io(&file))?;
        }
        let mut conn = Connection::open(&path).map_err(db("opening the database"))?;
        conn.busy_timeout(config.busy_timeout)
            .map_err(db("setting the busy timeout"))?;
        let mode = enable_wal(&conn, config.busy_timeout)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "journal mode {mode} instead of wal"
            )));
        }
        let synchronous = match config.synchronous {
            Synchronous::Full => "PRAGMA foreign_keys=ON; PRAGMA synchronous=FULL;",
            Synchronous::Normal => "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL;",
        };
        conn.execute_batch(synchronous)
            .map_err(db("setting pragmas"))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(io(&path))?;
        }
        migrate(&mut conn)?;
        let mut store = Store {
            conn,
            locks_dir,
            config,
            recovered: Vec::new(),
        };
        store.recover_interrupted()?;
        Ok(store)
    }

    /// The connection, for the other tables of the same database ([`crate::tasks::TaskStore`]).
    pub(crate) fn into_connection(self) -> Connection {
        self.conn
    }

    /// The data directory this store lives in.
    pub(crate) fn data_dir(&self) -> &Path {
        self.locks_dir.parent().unwrap_or(&self.locks_dir)
    }

    /// Runs this open found `running` with no live owner and marked `interrupted`.
    pub fn recovered_runs(&self) -> &[RunId] {
        &self.recovered
    }

    fn lock_path(&self, run: &RunId) -> PathBuf {
        self.locks_dir.join(format!("{run}.lock"))
    }

    fn run_orphaned(&self, run: &RunId) -> Result<bool, StoreError> {
        run_orphaned(&self.conn, &self.locks_dir, run)
    }

    fn recover_interrupted(&mut self) -> Result<(), StoreError> {
        let running: Vec<String> = {
            let mut stmt = self
                .conn
                .prepare("SELECT id FROM runs WHERE status = 'running'")
                .map_err(db("finding running runs"))?;
            let rows = stmt
                .query_map([], |r| r.get(0))
                .map_err(db("finding running runs"))?;
            rows.collect::<Result<_, _>>()
                .map_err(db("finding running runs"))?
        };
        for id in running {
            let Ok(run) = RunId::parse(&id) else { continue };
            if self.run_orphaned(&run)? {
                let tx = self.write_tx("recovering interrupted runs")?;
                let n = tx
                    .execute(MARK_INTERRUPTED, params![run.as_str(), now_ms()])
                    .map_err(db("recovering interrupted runs"))?;
                tx.commit().map_err(db("recovering interrupted runs"))?;
                if n > 0 {
                    self.recovered.push(run);
                }
            }
        }
        Ok(())
    }

    fn write_tx(&mut self, op: &'static str) -> Result<rusqlite::Transaction<'_>, StoreError> {
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db(op))
    }

    /// Records the start of a turn in one transaction: the thread (created for [`ThreadChoice::New`]), a
    /// `running` run and the user message. When this returns, the user message is durable. The returned guard
    /// holds the run's lock file; keep it until [`Store::finish_run`].
    ///
    /// For an existing thread, the same transaction checks the thread's `running` runs: one whose lock file is held
    /// by a live turn refuses the new run ([`StoreError::ThreadBusy`]); one whose owner died is marked
    /// `interrupted`.
    ///
    /// # Errors
    /// [`StoreError::ThreadNotFound`], [`StoreError::ThreadBusy`], [`StoreError::Io`] (lock file),
    /// [`StoreError::Database`].
    pub fn begin_run(&mut self, run: NewRun<'_>) -> Result<RunGuard, StoreError> {
        let run_id = RunId::random()?;
        let lock_path = self.lock_path(&run_id);
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&lock_path)
            .map_err(|source| StoreError::Io {
                path: lock_path.clone(),
                source,
            })?;
        let mut guard = RunGuard {
            thread_id: ThreadId::random()?,
            run_id: run_id.clone(),
            lock: Some((file, lock_path.clone())),
        };
        if let Some((file, _)) = &guard.lock {
            file.lock().map_err(|source| StoreError::Io {
                path: lock_path.clone(),
                source,
            })?;
        }
        let now = now_ms();
        let max_title = self.config.max_title_chars;
        let busy_check = match &run.thread {
            ThreadChoice::Existing(id) => Some(id.clone()),
            ThreadChoice::New { .. } => None,
        };
        let locks_dir = self.locks_dir.clone();
        let tx = self.write_tx("beginning a run")?;
        if let Some(thread) = busy_check {
            let running: Vec<String> = {
                let mut stmt = tx
                    .prepare("SELECT id FROM runs WHERE thread_id = ?1 AND status = 'running'")
                    .map_err(db("checking running runs"))?;
                let rows = stmt
                    .query_map(params![thread.as_str()], |r| r.get(0))
                    .map_err(db("checking running runs"))?;
                rows.collect::<Result<_, _>>()
                    .map_err(db("checking running runs"))?
            };
            for id in running {
                let Ok(other) = RunId::parse(&id) else {
                    continue;
                };
                if let Some(busy) =
                    run_holder(&tx, &locks_dir, &other)?.busy(thread.clone(), other.clone())
                {
                    return Err(busy);
                }
                tx.execute(MARK_INTERRUPTED, params![other.as_str(), now])
                    .map_err(db("recovering interrupted runs"))?;
            }
        }
        let thread_id = match run.thread {
            ThreadChoice::New { agent } => {
                let id = guard.thread_id.clone();
                let identity = run.cwd.and_then(dir_identity);
                tx.execute(
                    "INSERT INTO threads (id, agent, title, created_at_ms, updated_at_ms, cwd, cwd_dev, cwd_ino) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7)",
                    params![
                        id.as_str(),
                        agent,
                        title_from_prompt(run.title.unwrap_or(run.prompt), max_title),
                        now,
                        run.cwd,
                        identity.map(|(dev, _)| dev.cast_signed()),
                        identity.map(|(_, ino)| ino.cast_signed()),
                    ],
                )
                .map_err(db("creating a thread"))?;
                id
            }
            ThreadChoice::Existing(id) => {
                let n = tx
                    .execute(
                        "UPDATE threads SET updated_at_ms=?2 WHERE id=?1",
                        params![id.as_str(), now],
                    )
                    .map_err(db("updating a thread"))?;
                if n == 0 {
                    return Err(StoreError::ThreadNotFound(id));
                }
                id
            }
        };
        tx.execute(
            "INSERT INTO runs (id, thread_id, agent, model, status, started_at_ms, resumed_session_id)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
            params![run_id.as_str(), thread_id.as_str(), run.agent, run.model, now, run.resumed_session_id],
        )
        .map_err(db("recording a run"))?;
        tx.execute(
            "INSERT INTO messages (thread_id, run_id, role, content, created_at_ms) VALUES (?1, ?2, 'user', ?3, ?4)",
            params![thread_id.as_str(), run_id.as_str(), run.prompt, now],
        )
        .map_err(db("recording the user message"))?;
        tx.commit().map_err(db("beginning a run"))?;
        guard.thread_id = thread_id;
        Ok(guard)
    }

    /// Stores the native session id the agent reported during `run` (one transaction): it becomes the thread's
    /// current id, and is added to the history unless already there.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn record_session_id(
        &mut self,
        run: &RunGuard,
        session_id: &str,
    ) -> Result<SessionChange, StoreError> {
        let now = now_ms();
        let tx = self.write_tx("recording the session id")?;
        let previous: Option<String> = tx
            .query_row(
                "SELECT session_id FROM threads WHERE id=?1",
                params![run.thread_id.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("recording the session id"))?
            .flatten();
        tx.execute(
            "UPDATE threads SET session_id=?2, updated_at_ms=?3 WHERE id=?1",
            params![run.thread_id.as_str(), session_id, now],
        )
        .map_err(db("recording the session id"))?;
        tx.execute(
            "UPDATE runs SET session_id=?2 WHERE id=?1",
            params![run.run_id.as_str(), session_id],
        )
        .map_err(db("recording the session id"))?;
        tx.execute(
            "INSERT OR IGNORE INTO sessions (thread_id, session_id, run_id, first_seen_at_ms, seq)
             VALUES (?1, ?2, ?3, ?4, (SELECT COALESCE(MAX(seq), 0) + 1 FROM sessions WHERE thread_id=?1))",
            params![run.thread_id.as_str(), session_id, run.run_id.as_str(), now],
        )
        .map_err(db("recording the session id"))?;
        tx.commit().map_err(db("recording the session id"))?;
        let changed = previous.as_deref() != Some(session_id);
        Ok(SessionChange { previous, changed })
    }

    /// Appends assistant text to the run's message `message` (or starts a new assistant message when `None`),
    /// in one transaction. Returns the message id to pass on the next append.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn append_assistant_text(
        &mut self,
        run: &RunGuard,
        message: Option<i64>,
        text: &str,
    ) -> Result<i64, StoreError> {
        self.append_message(run, Role::Assistant, message, text)
    }

    /// Adds a tool summary line for `run` (one transaction).
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn add_tool_summary(&mut self, run: &RunGuard, summary: &str) -> Result<i64, StoreError> {
        self.append_message(run, Role::Tool, None, summary)
    }

    fn append_message(
        &mut self,
        run: &RunGuard,
        role: Role,
        message: Option<i64>,
        text: &str,
    ) -> Result<i64, StoreError> {
        let now = now_ms();
        let tx = self.write_tx("storing a message")?;
        let id = write_message(&tx, run, role, message, text, now)?;
        tx.commit().map_err(db("storing a message"))?;
        Ok(id)
    }

    /// Records how `run` ended, with its [`RunEnd::pending_text`], in one transaction, and releases its lock file.
    ///
    /// # Errors
    /// [`StoreError::Database`]; the lock is released in every case.
    pub fn finish_run(&mut self, mut run: RunGuard, end: &RunEnd) -> Result<(), StoreError> {
        let now = now_ms();
        let usage = end.usage.clone();
        let result = (|| {
            let tx = self.write_tx("finishing a run")?;
            if let Some(p) = end.pending_text.as_ref().filter(|p| !p.text.is_empty()) {
                write_message(&tx, &run, Role::Assistant, p.message, &p.text, now)?;
            }
            tx.execute(
                "UPDATE runs SET status=?2, ended_at_ms=?3, input_tokens=?4, output_tokens=?5,
                    cache_read_input_tokens=?6, cache_creation_input_tokens=?7, total_cost_usd=?8, error_code=?9,
                    error_reason=?10
                 WHERE id=?1",
                params![
                    run.run_id.as_str(),
                    end.status.as_str(),
                    now,
                    usage.as_ref().map(|u| to_i64(u.input_tokens)),
                    usage.as_ref().map(|u| to_i64(u.output_tokens)),
                    usage.as_ref().and_then(|u| u.cache_read_input_tokens).map(to_i64),
                    usage.as_ref().and_then(|u| u.cache_creation_input_tokens).map(to_i64),
                    end.total_cost_usd,
                    end.error_code,
                    end.error_reason,
                ],
            )
            .map_err(db("finishing a run"))?;
            tx.execute(
                "UPDATE threads SET updated_at_ms=?2 WHERE id=?1",
                params![run.thread_id.as_str(), now],
            )
            .map_err(db("finishing a run"))?;
            tx.commit().map_err(db("finishing a run"))
        })();
        run.release();
        result
    }

    /// The thread `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn thread(&self, id: &ThreadId) -> Result<Option<ThreadRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(THREAD_SELECT_BY_ID)
            .map_err(db("reading a thread"))?;
        let row = stmt
            .query_row(params![id.as_str()], thread_row)
            .optional()
            .map_err(db("reading a thread"))?;
        row.map(into_thread).transpose()
    }

    /// How many threads the store holds.
    ///
    /// # Errors
    /// [`StoreError::Database`].
    pub fn count_threads(&self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM threads", [], |r| r.get(0))
            .map_err(db("counting threads"))?;
        Ok(to_u64(n))
    }

    /// Up to `limit` threads, most recently updated first.
    ///
    /// # Errors
    /// [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn list_threads(&self, limit: usize) -> Result<Vec<ThreadRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(THREAD_SELECT_RECENT)
            .map_err(db("listing threads"))?;
        let rows = stmt
            .query_map(params![to_i64(limit as u64)], thread_row)
            .map_err(db("listing threads"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db("listing threads"))?;
        rows.into_iter().map(into_thread).collect()
    }

    /// Up to `limit` threads updated before `before` (`(updated_at_ms, id)`, exclusive; `None` = from the newest),
    /// most recently updated first, only those of `agent` when given: a stable page for cursor paging.
    ///
    /// # Errors
    /// [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn list_threads_page(
        &self,
        limit: usize,
        before: Option<(i64, &str)>,
        agent: Option<&str>,
    ) -> Result<Vec<ThreadRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(THREAD_SELECT_PAGE)
            .map_err(db("listing threads"))?;
        let (before_at, before_id) = match before {
            Some((at, id)) => (Some(at), Some(id)),
            None => (None, None),
        };
        let rows = stmt
            .query_map(
                params![to_i64(limit as u64), before_at, before_id, agent],
                thread_row,
            )
            .map_err(db("listing threads"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db("listing threads"))?;
        rows.into_iter().map(into_thread).collect()
    }

    /// The thread `id` with its messages, runs and session history.
    ///
    /// # Errors
    /// [`StoreError::ThreadNotFound`], [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn thread_detail(&self, id: &ThreadId) -> Result<ThreadDetail, StoreError> {
        let thread = self
            .thread(id)?
            .ok_or_else(|| StoreError::ThreadNotFound(id.clone()))?;
        let op = "reading a thread";
        let mut stmt = self
            .conn
            .prepare("SELECT id, run_id, role, content, created_at_ms FROM messages WHERE thread_id=?1 ORDER BY id")
            .map_err(db(op))?;
        let messages = stmt
            .query_map(params![id.as_str()], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get(3)?,
                    r.get(4)?,
                ))
            })
            .map_err(db(op))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db(op))?
            .into_iter()
            .map(|(mid, run, role, content, created_at_ms)| {
                Ok(MessageRecord {
                    id: mid,
                    run_id: parse_run(&run)?,
                    role: Role::parse(&role)?,
                    content,
                    created_at_ms,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let runs = self.runs_where("thread_id=?1 ORDER BY started_at_ms, rowid", id.as_str())?;
        let mut stmt = self
            .conn
            .prepare("SELECT session_id, run_id, first_seen_at_ms FROM sessions WHERE thread_id=?1 ORDER BY seq")
            .map_err(db(op))?;
        let sessions = stmt
            .query_map(params![id.as_str()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?))
            })
            .map_err(db(op))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db(op))?
            .into_iter()
            .map(|(session_id, run, first_seen_at_ms)| {
                Ok(SessionRecord {
                    session_id,
                    run_id: parse_run(&run)?,
                    first_seen_at_ms,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(ThreadDetail {
            thread,
            messages,
            runs,
            sessions,
        })
    }

    /// The run `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError::Database`], [`StoreError::Corrupt`].
    pub fn run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.runs_where("id=?1", id.as_str())?.into_iter().next())
    }

    fn runs_where(&self, clause: &str, arg: &str) -> Result<Vec<RunRecord>, StoreError> {
        let op = "reading runs";
        let sql = format!(
            "SELECT id, thread_id, agent, model, status, started_at_ms, ended_at_ms, resumed_session_id, session_id,
                input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens, total_cost_usd,
                error_code, error_reason FROM runs WHERE {clause}"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(db(op))?;
        type Raw = (
            String,
            String,
            String,
            Option<String>,
            String,
            i64,
            Option<i64>,
            Option<String>,
            Option<String>,
            (Option<i64>, Option<i64>, Option<i64>, Option<i64>),
            Option<f64>,
            (Option<String>, Option<String>),
        );
        let raws: Vec<Raw> = stmt
            .query_map(params![arg], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    (r.get(9)?, r.get(10)?, r.get(11)?, r.get(12)?),
                    r.get(13)?,
                    (r.get(14)?, r.get(15)?),
                ))
            })
            .map_err(db(op))?
            .collect::<Result<_, _>>()
            .map_err(db(op))?;
        raws.into_iter()
            .map(
                |(
                    id,
                    thread,
                    agent,
                    model,
                    status,
                    started,
                    ended,
                    resumed,
                    session,
                    u,
                    cost,
                    (error_code, error_reason),
                )| {
                    let usage = match u {
                        (Some(i), Some(o), cr, cc) => Some(RunUsage {
                            input_tokens: to_u64(i),
                            output_tokens: to_u64(o),
                            cache_read_input_tokens: cr.map(to_u64),
                            cache_creation_input_tokens: cc.map(to_u64),
                        }),
                        _ => None,
                    };
                    Ok(RunRecord {
                        id: parse_run(&id)?,
                        thread_id: parse_thread(&thread)?,
                        agent,
                        model,
                        status: RunStatus::parse(&status)?,
                        started_at_ms: started,
                        ended_at_ms: ended,
                        resumed_session_id: resumed,
                        session_id: session,
                        usage,
                        error_code,
                        error_reason,
                        total_cost_usd: cost,
                    })
                },
            )
            .collect()
    }
}

fn write_message(
    tx: &rusqlite::Transaction<'_>,
    run: &RunGuard,
    role: Role,
    message: Option<i64>,
    text: &str,
    now: i64,
) -> Result<i64, StoreError> {
    let id = match message {
        Some(id) => {
            tx.execute(
                "UPDATE messages SET content = content || ?2 WHERE id=?1 AND run_id=?3",
                params![id, text, run.run_id.as_str()],
            )
            .map_err(db("appending to a message"))?;
            id
        }
        None => {
            tx.execute(
                "INSERT INTO messages (thread_id, run_id, role, content, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run.thread_id.as_str(), run.run_id.as_str(), role.as_str(), text, now],
            )
            .map_err(db("storing a message"))?;
            tx.last_insert_rowid()
        }
    };
    tx.execute(
        "UPDATE threads SET updated_at_ms=?2 WHERE id=?1",
        params![run.thread_id.as_str(), now],
    )
    .map_err(db("storing a message"))?;
    Ok(id)
}

macro_rules! thread_select {
    ($tail:literal) => {
        concat!(
            "SELECT t.id, t.agent, t.title, t.session_id, t.created_at_ms, t.updated_at_ms, ",
            "(SELECT COUNT(*) FROM runs r WHERE r.thread_id = t.id), t.cwd, t.cwd_dev, t.cwd_ino, ",
            "(SELECT r.status FROM runs r WHERE r.thread_id = t.id ORDER BY r.started_at_ms DESC, r.rowid DESC LIMIT 1) ",
            "FROM threads t ",
            $tail
        )
    };
}
const THREAD_SELECT_BY_ID: &str = thread_select!("WHERE t.id=?1");
const THREAD_SELECT_RECENT: &str =
    thread_select!("ORDER BY t.updated_at_ms DESC, t.rowid DESC LIMIT ?1");
const THREAD_SELECT_PAGE: &str = thread_select!(
    "WHERE (?2 IS NULL OR t.updated_at_ms < ?2 OR (t.updated_at_ms = ?2 AND t.id < ?3))
       AND (?4 IS NULL OR t.agent = ?4)
     ORDER BY t.updated_at_ms DESC, t.id DESC LIMIT ?1"
);

type ThreadRow = (
    String,
    String,
    String,
    Option<String>,
    i64,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

fn thread_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ThreadRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
    ))
}

fn into_thread(row: ThreadRow) -> Result<ThreadRecord, StoreError> {
    let (id, agent, title, session_id, created_at_ms, updated_at_ms, runs, cwd, dev, ino, last) =
        row;
    Ok(ThreadRecord {
        id: parse_thread(&id)?,
        agent,
        title,
        session_id,
        created_at_ms,
        updated_at_ms,
        run_count: to_u64(runs),
        cwd,
        cwd_identity: dev
            .zip(ino)
            .map(|(dev, ino)| (dev.cast_unsigned(), ino.cast_unsigned())),
        last_run_status: last.as_deref().map(RunStatus::parse).transpose()?,
    })
}

fn parse_run(s: &str) -> Result<RunId, StoreError> {
    RunId::parse(s).map_err(|_| StoreError::Corrupt(format!("invalid run id {s:?}")))
}

fn parse_thread(s: &str) -> Result<ThreadId, StoreError> {
    ThreadId::parse(s).map_err(|_| StoreError::Corrupt(format!("invalid thread id {s:?}")))
}

mod manage;
pub use manage::{DeletedThread, MAX_PREFIX_CANDIDATES};

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> Store {
        Store::open(dir).expect("open store")
    }

    fn new_run<'a>(thread: ThreadChoice, prompt: &'a str, resume: Option<&'a str>) -> NewRun<'a> {
        NewRun {
            thread,
            agent: "awp-agent",
            model: Some("m1"),
            prompt,
            resumed_session_id: resume,
            title: None,
            cwd: Some("/srv/project"),
        }
    }

    fn new_thread() -> ThreadChoice {
        ThreadChoice::New {
            agent: "awp-agent".into(),
        }
    }

    fn succeeded() -> RunEnd {
        RunEnd {
            status: RunStatus::Succeeded,
            usage: Some(RunUsage {
                input_tokens: 3,
                output_tokens: 5,
                ..RunUsage::default()
            }),
            error_code: None,
            error_reason: None,
            total_cost_usd: Some(0.25),
            pending_text: None,
        }
    }

    #[test]
    fn escape_controls_makes_terminal_controls_visible() {
        let check = |text: &str, single_line: bool, expect: &str| {
            assert_eq!(escape_controls(text, single_line), expect, "{text:?}");
        };
        check("plain ünïcode", true, "plain ünïcode");
        check("q\u{1b}[31mred\u{7}", false, "q\\u{1b}[31mred\\u{7}");
        check("a\nb\tc\r", false, "a\nb\tc\\u{d}");
        check("a\nb\tc", true, "a\\u{a}b\\u{9}c");
        check(
            "\u{202e}evil\u{2028}x\u{2029}",
            true,
            "\\u{202e}evil\\u{2028}x\\u{2029}",
        );
        check("\u{9b}\u{7f}", false, "\\u{9b}\\u{7f}");
    }

    #[test]
    fn concurrent_first_opens_of_a_fresh_dir_all_succeed() {
        for _ in 0..5 {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("fresh");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
            let openers: Vec<_> = (0..6)
                .map(|_| {
                    let (dir, barrier) = (dir.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        Store::open(&dir).map(|store| store.list_threads(10).map(|t| t.len()))
                    })
                })
                .collect();
            for opener in openers {
                let listed = opener.join().expect("opener thread");
                assert!(matches!(listed, Ok(Ok(0))), "{listed:?}");
            }
        }
    }

    #[test]
    fn a_thread_with_a_live_run_refuses_a_second_run() {
        let tmp = tempfile::tempdir().unwrap();
        let mut first = open(tmp.path());
        let mut second = open(tmp.path());
        let live = first.begin_run(new_run(new_thread(), "one", None)).unwrap();
        let thread = ThreadChoice::Existing(live.thread_id.clone());
        let err = second
            .begin_run(new_run(thread.clone(), "two", None))
            .unwrap_err();
        assert_eq!(err.code(), "thread_busy");
        assert!(
            matches!(&err, StoreError::ThreadBusy { run, .. } if *run == live.run_id),
            "{err:?}"
        );
        // Nothing of the refused run was stored.
        let detail = second.thread_detail(&live.thread_id).unwrap();
        assert_eq!(detail.runs.len(), 1);
        assert_eq!(detail.messages.len(), 1);
        // Its owner gone (lock released without finishing), the thread is free and the dead run interrupted.
        let dead = live.run_id.clone();
        drop(live);
        let next = second.begin_run(new_run(thread, "three", None)).unwrap();
        assert_eq!(
            second.run(&dead).unwrap().unwrap().status,
            RunStatus::Interrupted
        );
        second.finish_run(next, &succeeded()).unwrap();
    }

    #[test]
    fn a_turn_round_trips_through_a_real_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = open(tmp.path());
        let run = store
            .begin_run(new_run(new_thread(), "hello there\nsecond line", None))
            .unwrap();
        let (thread_id, run_id) = (run.thread_id.clone(), run.run_id.clone());
        assert!(
            tmp.path()
                .join("runs")
                .join(format!("{run_id}.lock"))
                .is_file()
        );
        assert_eq!(
            store.record_session_id(&run, "s-1").unwrap(),
            SessionChange {
                previous: None,
                changed: true
            }
        );
        let m = store.append_assistant_text(&run, None, "Hel").unwrap();
        assert_eq!(store.append_assistant_text(&run, Some(m), "lo").unwrap(), m);
        store.add_tool_summary(&run, "⚙ Bash {}").unwrap();
        store.finish_run(run, &succeeded()).unwrap();
        assert!(
            !tmp.path()
                .join("runs")
                .join(format!("{run_id}.lock"))
                .exists()
        );
        drop(store);

        let store = open(tmp.path());
        let detail = store.thread_detail(&thread_id).unwrap();
        assert_eq!(detail.thread.title, "hello there");
        assert_eq!(detail.thread.session_id.as_deref(), Some("s-1"));
        assert_eq!(detail.thread.run_count, 1);
        let msgs: Vec<(Role, &str)> = detail
            .messages
            .iter()
            .map(|m| (m.role, m.content.as_str()))
            .collect();
        assert_eq!(
            msgs,
            [
                (Role::User, "hello there\nsecond line"),
                (Role::Assistant, "Hello"),
                (Role::Tool, "⚙ Bash {}")
            ]
        );
        let run = &detail.runs[0];
        assert_eq!(run.id, run_id);
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(
            run.usage
                .as_ref()
                .map(|u| (u.input_tokens, u.output_tokens)),
            Some((3, 5))
        );
        assert_eq!(run.total_cost_usd, Some(0.25));
        assert!(run.ended_at_ms.is_some());
        assert_eq!(store.list_threads(10).unwrap().len(), 1);
        assert!(store.recovered_runs().is_empty());
    }

    #[test]
    fn a_changed_session_id_becomes_current_and_the_old_one_stays_in_history() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = open(tmp.path());
        let run = store.begin_run(new_run(new_thread(), "a", None)).unwrap();
        store.record_session_id(&run, "A").unwrap();
        let thread = run.thread_id.clone();
        store.finish_run(run, &succeeded()).unwrap();
        let run = store
            .begin_run(new_run(
                ThreadChoice::Existing(thread.clone()),
                "b",
                Some("A"),
            ))
            .unwrap();
        let change = store.record_session_id(&run, "B").unwrap();
        assert_eq!(
            change,
            SessionChange {
                previous: Some("A".into()),
                changed: true
            }
        );
        // Claude Code repeats `init` every turn: the same id again changes nothing.
        assert!(!store.record_session_id(&run, "B").unwrap().changed);
        store.finish_run(run, &succeeded()).unwrap();
        let detail = store.thread_detail(&thread).unwrap();
        assert_eq!(detail.thread.session_id.as_deref(), Some("B"));
        let history: Vec<&str> = detail
            .sessions
            .iter()
            .map(|s| s.session_id.as_str())
            .collect();
        assert_eq!(history, ["A", "B"]);
        assert_eq!(detail.runs[1].resumed_session_id.as_deref(), Some("A"));
        assert_eq!(detail.runs[1].session_id.as_deref(), Some("B"));
    }

    #[test]
    fn open_marks_orphaned_running_runs_interrupted_and_leaves_live_ones_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = open(tmp.path());
        let live = store
            .begin_run(new_run(new_thread(), "live", None))
            .unwrap();
        let dead = store
            .begin_run(new_run(new_thread(), "dead", None))
            .unwrap();
        let stale = store
            .begin_run(new_run(new_thread(), "stale", None))
            .unwrap();
        let (dead_id, stale_id) = (dead.run_id.clone(), stale.run_id.clone());
        // A dead owner either removed its lock file or left it unlocked.
        drop(dead);
        drop(stale);
        let stale_lock = tmp.path().join("runs").join(format!("{stale_id}.lock"));
        std::fs::write(&stale_lock, b"").unwrap();

        let second = open(tmp.path());
        let mut recovered = second.recovered_runs().to_vec();
        recovered.sort();
        let mut expect = vec![dead_id.clone(), stale_id.clone()];
        expect.sort();
        assert_eq!(recovered, expect);
        assert!(!stale_lock.exists());
        let status = |id: &RunId| second.run(id).unwrap().unwrap();
        assert_eq!(status(&dead_id).status, RunStatus::Interrupted);
        assert_eq!(
            status(&dead_id).error_code.as_deref(),
            Some("host_interrupted")
        );
        assert!(
            status(&dead_id)
                .error_reason
                .as_deref()
                .is_some_and(|why| why.contains("ended before the turn did")),
            "an interrupted run says why"
        );
        assert_eq!(status(&live.run_id).status, RunStatus::Running);
        store.finish_run(live, &succeeded()).unwrap();
    }

    #[test]
    fn pending_text_is_stored_with_the_end_of_the_run() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = open(tmp.path());
        let run = store.begin_run(new_run(new_thread(), "p", None)).unwrap();
        let thread = run.thread_id.clone();
        let m = store.append_assistant_text(&run, None, "first ").unwrap();
        let end = RunEnd {
            pending_text: Some(PendingText {
                message: Some(m),
                text: "and last".into(),
            }),
            ..succeeded()
        };
        store.finish_run(run, &end).unwrap();
        let detail = store.thread_detail(&thread).unwrap();
        assert_eq!(detail.messages[1].content, "first and last");
        assert_eq!(detail.messages.len(), 2);
    }

    #[test]
    fn synchronous_is_configurable() {
        let tmp = tempfile::tempdir().unwrap();
        let check = |dir: &str, synchronous: Synchronous, expect: i64| {
            let config = StoreConfig {
                synchronous,
                ..StoreConfig::default()
            };
            let store = Store::open_with(&tmp.path().join(dir), config).unwrap();
            let got: i64 = store
                .conn
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(got, expect);
        };
        check("full", Synchronous::Full, 2);
        check("normal", Synchronous::Normal, 1);
    }

    #[test]
    fn a_schema_1_database_gains_the_tasks_table_and_keeps_its_threads() {
        let tmp = tempfile::tempdir().unwrap();
        let thread = {
            let mut store = open(tmp.path());
            let run = store.begin_run(new_run(new_thread(), "old", None)).unwrap();
            let thread = run.thread_id.clone();
            store.finish_run(run, &succeeded()).unwrap();
            thread
        };
        // Make it what awp-host wrote before managed tasks: schema 1, no `tasks` table.
        let conn = Connection::open(tmp.path().join(DATABASE_FILE)).unwrap();
        conn.execute_batch(
            "DROP TABLE tasks; ALTER TABLE threads DROP COLUMN cwd; ALTER TABLE threads DROP COLUMN cwd_dev; ALTER TABLE threads DROP COLUMN cwd_ino; ALTER TABLE runs DROP COLUMN error_reason; ALTER TABLE runs DROP COLUMN agent_pid;
             DROP TABLE provider_models; DROP TABLE providers;
             PRAGMA user_version = 1;",
        )
        .unwrap();
        drop(conn);
        let store = open(tmp.path());
        let version: u32 = store
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let tasks: i64 = store
            .conn
            .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tasks, 0);
        assert_eq!(store.thread_detail(&thread).unwrap().thread.title, "old");
    }

    #[test]
    fn threads_remember_their_working_directory_and_older_threads_gain_an_empty_one() {
        let tmp = tempfile::tempdir().unwrap();
        let thread = {
            let mut store = open(tmp.path());
            let run = store
                .begin_run(new_run(new_thread(), "here", None))
                .unwrap();
            let thread = run.thread_id.clone();
            store.finish_run(run, &succeeded()).unwrap();
            assert_eq!(
                store.thread(&thread).unwrap().unwrap().cwd.as_deref(),
                Some("/srv/project")
            );
            // A follow-up never changes the recorded directory.
            let mut follow = new_run(ThreadChoice::Existing(thread.clone()), "more", None);
            follow.cwd = Some("/elsewhere");
            let run = store.begin_run(follow).unwrap();
            store.finish_run(run, &succeeded()).unwrap();
            assert_eq!(
                store.list_threads(10).unwrap()[0].cwd.as_deref(),
                Some("/srv/project")
            );
            thread
        };
        // What awp-host wrote before schema 3: no `cwd` column.
        let conn = Connection::open(tmp.path().join(DATABASE_FILE)).unwrap();
        conn.execute_batch(
            "ALTER TABLE threads DROP COLUMN cwd; ALTER TABLE threads DROP COLUMN cwd_dev; ALTER TABLE threads DROP COLUMN cwd_ino; ALTER TABLE runs DROP COLUMN error_reason; ALTER TABLE runs DROP COLUMN agent_pid;
             DROP TABLE provider_models; DROP TABLE providers;
             PRAGMA user_version = 2;",
        )
        .unwrap();
        drop(conn);
        let store = open(tmp.path());
        let t = store.thread(&thread).unwrap().unwrap();
        assert_eq!((t.title.as_str(), t.cwd), ("here", None));
    }

    #[test]
    fn a_new_thread_records_its_directorys_device_and_inode() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("project");
        std::fs::create_dir(&dir).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        let mut store = open(tmp.path());
        let mut run = new_run(new_thread(), "here", None);
        let dir_str = dir.to_str().unwrap().to_owned();
        run.cwd = Some(&dir_str);
        let run = store.begin_run(run).unwrap();
        let thread = run.thread_id.clone();
        store.finish_run(run, &succeeded()).unwrap();
        let t = store.thread(&thread).unwrap().unwrap();
        assert_eq!(t.cwd_identity, Some((meta.dev(), meta.ino())));
        // A directory that cannot be inspected records none.
        let run = store
            .begin_run(new_run(new_thread(), "nowhere", None))
            .unwrap();
        let none = run.thread_id.clone();
        store.finish_run(run, &succeeded()).unwrap();
        assert_eq!(store.thread(&none).unwrap().unwrap().cwd_identity, None);
        // Threads of schema 5 (before the identity columns) gain no identity when migrated.
        drop(store);
        let conn = Connection::open(tmp.path().join(DATABASE_FILE)).unwrap();
        conn.execute_batch(
            "ALTER TABLE threads DROP COLUMN cwd_dev; ALTER TABLE threads DROP COLUMN cwd_ino;
             PRAGMA user_version = 5;",
        )
        .unwrap();
        drop(conn);
        let store = open(tmp.path());
        let t = store.thread(&thread).unwrap().unwrap();
        assert_eq!(
            (t.cwd.as_deref(), t.cwd_identity),
            (Some(dir_str.as_str()), None)
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        drop(open(tmp.path()));
        let conn = Connection::open(tmp.path().join(DATABASE_FILE)).unwrap();
        conn.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(conn);
        let err = Store::open(tmp.path()).unwrap_err();
        assert_eq!(err.code(), "store_schema_too_new");
    }

    #[test]
    fn pragmas_and_constraints_hold() {
        let tmp = tempfile::tempdir().unwrap();
        let store = open(tmp.path());
        let get = |p: &str| -> String {
            store
                .conn
                .query_row(&format!("PRAGMA {p}"), [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(get("journal_mode"), "wal");
        let fk: i64 = store
            .conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        let version: u32 = store
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let orphan = store.conn.execute(
            "INSERT INTO messages (thread_id, run_id, role, content, created_at_ms) VALUES ('x', 'y', 'user', '', 0)",
            [],
        );
        assert!(
            orphan.is_err(),
            "foreign keys must reject an orphan message"
        );
    }

    #[test]
    fn an_unknown_thread_is_a_typed_error_and_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = open(tmp.path());
        let missing = ThreadId::parse("th_0000000000000000").unwrap();
        let err = store
            .begin_run(new_run(ThreadChoice::Existing(missing), "x", None))
            .unwrap_err();
        assert_eq!(err.code(), "thread_not_found");
        let runs: i64 = store
            .conn
            .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(runs, 0);
        assert_eq!(
            std::fs::read_dir(tmp.path().join("runs")).unwrap().count(),
            0
        );
    }

    #[test]
    fn titles_are_bounded_at_the_limit_and_one_past_it() {
        let check = |input: &str, max: usize, expect: &str| {
            assert_eq!(title_from_prompt(input, max), expect)
        };
        check("abcde", 5, "abcde");
        check("abcdef", 5, "abcd…");
        check("\n\n  first\tline  \nsecond", 80, "first line");
        check("", 80, "");
        check("ééééé", 5, "ééééé");
        check("éééééé", 5, "éééé…");
    }

    #[cfg(unix)]
    #[test]
    fn the_database_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        drop(open(&dir));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(DATABASE_FILE)), 0o600);
    }

    #[cfg(unix)]
    #[test]
    fn read_only_database_files_left_behind_are_made_writable_before_opening() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let thread = {
            let mut store = open(&dir);
            let run = store.begin_run(new_run(new_thread(), "one", None)).unwrap();
            let thread = run.thread_id.clone();
            store.finish_run(run, &succeeded()).unwrap();
            thread
        };
        // What a failed write against a read-only database leaves: the database and its `-wal`/`-shm` (created
        // with the database's mode) all read-only.
        let files: Vec<PathBuf> = ["", "-wal", "-shm"]
            .iter()
            .map(|s| dir.join(format!("{DATABASE_FILE}{s}")))
            .collect();
        for file in &files {
            if !file.exists() {
                std::fs::write(file, b"").unwrap();
            }
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        let mut store = open(&dir);
        for file in &files {
            if let Ok(meta) = std::fs::metadata(file) {
                assert_eq!(
                    meta.permissions().mode() & 0o777,
                    0o600,
                    "{}",
                    file.display()
                );
            }
        }
        let run = store
            .begin_run(new_run(ThreadChoice::Existing(thread.clone()), "two", None))
            .unwrap();
        store.finish_run(run, &succeeded()).unwrap();
        assert_eq!(store.thread(&thread).unwrap().unwrap().run_count, 2);
    }
}
