//! The task service: the store shared by the HTTP API and the worker pool, and the pool itself.
//!
//! Store calls run on tokio's blocking threads (SQLite with `synchronous=FULL` fsyncs on every commit).
//! Workers sleep on a [`Notify`] woken by each new task; a worker claims the oldest `queued` task, runs it
//! ([`run_task`]) and records its end.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentwire_process::CancellationToken;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::ids::TaskId;
use crate::store::StoreError;
use crate::tasks::model::{TaskLimits, TaskRecord, TaskRequest};
use crate::tasks::store::{Submission, SubmitError, TaskStore};
use crate::tasks::worker::{AllowList, WorkerConfig, run_task};

/// The store and limits of a task server; cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct TaskService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Mutex<TaskStore>,
    wake: Notify,
    limits: TaskLimits,
}

impl TaskService {
    /// A service over an opened [`TaskStore`].
    pub fn new(store: TaskStore, limits: TaskLimits) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: Mutex::new(store),
                wake: Notify::new(),
                limits,
            }),
        }
    }

    /// The limits requests are checked against.
    pub fn limits(&self) -> &TaskLimits {
        &self.inner.limits
    }

    async fn with_store<T, E>(
        &self,
        call: impl FnOnce(&mut TaskStore, &TaskLimits) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut store = inner.store.lock().unwrap_or_else(PoisonError::into_inner);
            call(&mut store, &inner.limits)
        })
        .await
        .unwrap_or_else(|_| Err(E::from(StoreError::Unavailable)))
    }

    /// Stores a task (durable when this returns) or replays the one `key` names; wakes a worker for a new one.
    ///
    /// # Errors
    /// [`SubmitError`] (conflict, queue full, store failure).
    pub async fn submit(
        &self,
        key: String,
        request: TaskRequest,
    ) -> Result<Submission, SubmitError> {
        let submission = self
            .with_store(move |store, limits| store.submit(&key, &request, limits.max_pending_tasks))
            .await?;
        if matches!(submission, Submission::Created(_)) {
            self.inner.wake.notify_waiters();
        }
        Ok(submission)
    }

    /// The task `id`, if stored.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.with_store(move |store, _| store.get(&id)).await
    }

    /// Starts `config.workers` workers (at least 1) that run queued tasks until `shutdown` is cancelled; running
    /// tasks are then stopped and recorded `lost` (`host_stopped`). Await [`WorkerPool::join`] for them to end.
    pub fn start_workers(
        &self,
        allow: AllowList,
        config: WorkerConfig,
        shutdown: CancellationToken,
    ) -> WorkerPool {
        let allow = Arc::new(allow);
        let config = Arc::new(config);
        let mut set = JoinSet::new();
        for _ in 0..config.workers.max(1) {
            set.spawn(worker_loop(
                self.clone(),
                Arc::clone(&allow),
                Arc::clone(&config),
                shutdown.clone(),
            ));
        }
        WorkerPool { set }
    }
}

/// The running workers of [`TaskService::start_workers`].
#[derive(Debug)]
pub struct WorkerPool {
    set: JoinSet<()>,
}

impl WorkerPool {
    /// Waits until every worker has ended (after the shutdown token was cancelled).
    pub async fn join(mut self) {
        while self.set.join_next().await.is_some() {}
    }
}

/// Pause after a failed store call before a worker tries again.
const STORE_RETRY: Duration = Duration::from_secs(1);

async fn worker_loop(
    service: TaskService,
    allow: Arc<AllowList>,
    config: Arc<WorkerConfig>,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        let notified = service.inner.wake.notified();
        tokio::pin!(notified);
        // Registered before looking at the queue, so a task submitted in between still wakes this worker.
        notified.as_mut().enable();
        match service.with_store(|store, _| store.claim_next()).await {
            Ok(Some(task)) => {
                let outcome = run_task(&task, &allow, service.limits(), &config, &shutdown).await;
                let id = task.id.clone();
                if let Err(error) = service
                    .with_store(move |store, _| store.finish(&id, &outcome))
                    .await
                {
                    tracing::error!(task = %task.id, code = error.code(), %error, "recording a task's end failed");
                }
                continue;
            }
            Ok(None) => {}
            Err(error) => {
                tracing::error!(code = error.code(), %error, "claiming a task failed");
                tokio::select! {
                    () = tokio::time::sleep(STORE_RETRY) => continue,
                    () = shutdown.cancelled() => break,
                }
            }
        }
        tokio::select! {
            () = &mut notified => {}
            () = shutdown.cancelled() => break,
        }
    }
}
