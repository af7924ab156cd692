//! Managed tasks: the control-plane task API that `awp-agent`'s `awp_run_managed_task` tool submits to, and the
//! local worker pool that runs the tasks.
//!
//! - [`model`] (sans-IO): [`TaskLimits`], request validation ([`TaskRequest`]), [`TaskStatus`], the wire DTO.
//! - [`store`]: tasks in the host's SQLite store ([`TaskStore`]): durable before `201`, idempotency keys,
//!   `running` → `lost` at the next start (never re-run), one task server per data directory.
//! - [`worker`]: the executable [`AllowList`] (checked at execution time; the final authority) and [`run_task`]
//!   on `agentwire-process` (no shell, own process group, bounded output, timeout stops the group).
//! - [`service`]: [`TaskService`], the store shared by the API and the [`WorkerPool`].
//! - [`api`]: the HTTP/1.1 server ([`TaskServer`]): `POST /v1/tasks`, `GET /v1/tasks/{id}`, bearer key compared
//!   in constant time ([`ApiKey`]), Host/Origin checks, connection cap, header-read timeout, body limit.
//!
//! What is deliberately absent: cancelling a task through the API, listing tasks, streaming output, remote
//! workers. A task is not a sandbox: the allow-listed program runs with the server's user and the OS environment
//! allowlist.

pub mod api;
pub mod model;
pub mod service;
pub mod store;
pub mod worker;

pub use api::{API_KEY_VAR, ApiConfig, ApiKey, ApiKeyError, ListenError, TaskServer};
pub use model::{TaskLimits, TaskRecord, TaskRequest, TaskRequestError, TaskStatus};
pub use service::{TaskService, WorkerPool};
pub use store::{Submission, SubmitError, TaskOutcome, TaskStore};
pub use worker::{AllowList, AllowListError, WorkerConfig, run_task};
