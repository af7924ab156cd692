//! Detached runs: turns started for a caller that does not wait for them (the local control plane's
//! `sessions.runDetached`), each recorded in the store exactly like an `awp-host chat` turn.
//!
//! [`RunManager::start`] returns as soon as the run and its user message are durable (the same moment `chat`
//! would write the prompt to the agent), with the thread and run ids; the turn then goes on in a tokio task that owns
//! its own [`Store`] connection. Events are passed to the manager's [`RunEvents`] sink as they are recorded, and the
//! end of the run as [`RunSignal::Ended`]. [`RunManager::cancel`] is idempotent; [`RunManager::shutdown`] cancels
//! every live run and waits (bounded) for their ends to be recorded.
//!
//! The same store rules as `chat` hold: a thread with a live run refuses a second one (`thread_busy`), and a run cut
//! off by a host crash is found `interrupted` at the next open.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire_awp::NormalizedEvent;
use tokio::sync::{oneshot, watch};

use crate::agents::AgentRegistry;
use crate::ids::{RunId, ThreadId};
use crate::store::Store;
use crate::turn::{
    RunRecordedHook, TurnOptions, TurnReport, TurnRequest, TurnSetupError, run_turn,
};

/// What a detached run reports while it goes on.
#[derive(Clone, Debug)]
pub enum RunSignal {
    /// An event of the turn, after it was recorded.
    Event(NormalizedEvent),
    /// The run ended and its end is recorded.
    Ended(Box<TurnReport>),
    /// The store failed mid-turn: the run is left `running` and becomes `interrupted` at the next open.
    StoreFailed {
        /// The store error's stable code.
        code: &'static str,
        /// Its message.
        message: String,
    },
}

/// Where a [`RunManager`] sends each run's [`RunSignal`]s (e.g. the local control plane's event hub).
pub type RunEvents = Arc<dyn Fn(&RunId, RunSignal) + Send + Sync>;

/// Environment variables for the agent of a recorded run (thread, run): see
/// [`TurnOptions::on_run_recorded`](crate::turn::TurnOptions::on_run_recorded).
pub type AgentEnv = Arc<dyn Fn(&ThreadId, &RunId) -> Vec<(String, String)> + Send + Sync>;

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct DetachedRequest {
    /// Agent name; `None` is the registry's default agent (or the thread's agent when `thread` is set).
    pub agent: Option<String>,
    /// Thread to continue; `None` starts a new one.
    pub thread: Option<ThreadId>,
    /// The prompt.
    pub prompt: String,
    /// Model override.
    pub model: Option<String>,
    /// Working directory of the agent for this turn (DeepChat's `projectDir`); must be an existing directory.
    pub cwd: Option<PathBuf>,
    /// Title of a new thread.
    pub title: Option<String>,
}

/// A run that [`RunManager::start`] recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartedRun {
    /// The thread (new or continued).
    pub thread_id: ThreadId,
    /// The run.
    pub run_id: RunId,
}

/// Why [`RunManager::start`] recorded no run.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No such agent, or it is not usable.
    #[error(transparent)]
    Agent(#[from] crate::agents::AgentError),
    /// The working directory is not an existing directory.
    #[error("the working directory {} is not an existing directory", path.display())]
    BadCwd {
        /// The path given.
        path: PathBuf,
    },
    /// The turn could not be set up (empty prompt, launch rules, thread busy or unknown, store failure).
    #[error(transparent)]
    Setup(#[from] TurnSetupError),
    /// The manager is shutting down and starts no new runs.
    #[error("the host is shutting down")]
    ShuttingDown,
    /// The run's thread or runtime could not be started.
    #[error("could not start the run's thread")]
    Runtime(#[source] std::io::Error),
    /// The run task ended before recording a run (it panicked).
    #[error("the run task ended before recording the run")]
    TaskLost,
}

impl StartError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            StartError::Agent(e) => e.code(),
            StartError::BadCwd { .. } => "invalid_project_dir",
            StartError::Setup(e) => e.code(),
            StartError::ShuttingDown => "shutting_down",
            StartError::Runtime(_) | StartError::TaskLost => "internal_error",
        }
    }
}

/// What [`RunManager::cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run is live in this host: cancellation was requested (or had been already).
    Requested,
    /// The run is not live in this host (ended, or started by another process).
    NotLive,
}

struct LiveRun {
    cancel: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

/// Starts and tracks detached runs of one data directory. Cheap to share behind an `Arc`.
pub struct RunManager {
    data_dir: PathBuf,
    registry: Arc<AgentRegistry>,
    options: TurnOptions,
    events: RunEvents,
    agent_env: Option<AgentEnv>,
    live: Mutex<Live>,
}

#[derive(Default)]
struct Live {
    runs: HashMap<RunId, LiveRun>,
    shutting_down: bool,
}

impl std::fmt::Debug for RunManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunManager")
            .field("data_dir", &self.data_dir)
            .field("live", &self.live_runs().len())
            .finish_non_exhaustive()
    }
}

impl RunManager {
    /// A manager recording into the store of `data_dir`, launching agents from `registry` with `options` (its
    /// `cwd`, `abort` and `on_run_recorded` are set per run), sending signals to `events`.
    pub fn new(
        data_dir: PathBuf,
        registry: Arc<AgentRegistry>,
        options: TurnOptions,
        events: RunEvents,
    ) -> RunManager {
        RunManager {
            data_dir,
            registry,
            options,
            events,
            agent_env: None,
            live: Mutex::new(Live::default()),
        }
    }

    /// Sets the environment added to each run's agent (e.g. a run-scoped local-control token), computed once the
    /// run is recorded. Default: nothing added.
    pub fn with_agent_env(mut self, agent_env: AgentEnv) -> RunManager {
        self.agent_env = Some(agent_env);
        self
    }

    /// The runs live in this manager.
    pub fn live_runs(&self) -> Vec<RunId> {
        self.lock().runs.keys().cloned().collect()
    }

    /// Whether `run` is live in this manager.
    pub fn is_live(&self, run: &RunId) -> bool {
        self.lock().runs.contains_key(run)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        // A panic while holding this lock leaves plain data behind; keep serving it.
        lock(&self.live)
    }

    /// Starts a turn and returns once its run and user message are durable.
    ///
    /// # Errors
    /// [`StartError`]; no run was recorded.
    pub async fn start(
        self: &Arc<Self>,
        request: DetachedRequest,
    ) -> Result<StartedRun, StartError> {
        if self.lock().shutting_down {
            return Err(StartError::ShuttingDown);
        }
        if let Some(cwd) = &request.cwd
            && !cwd.is_dir()
        {
            return Err(StartError::BadCwd { path: cwd.clone() });
        }
        let mut store = Store::open(&self.data_dir).map_err(TurnSetupError::Store)?;
        let agent_name = match (&request.agent, &request.thread) {
            (Some(name), _) => Some(name.clone()),
            (None, Some(thread)) => store
                .thread(thread)
                .map_err(TurnSetupError::Store)?
                .map(|t| t.agent),
            (None, None) => None,
        };
        let agent = self.registry.resolve(agent_name.as_deref())?.clone();

        let (recorded_tx, recorded_rx) = oneshot::channel::<StartedRun>();
        let recorded_tx = Mutex::new(Some(recorded_tx));
        let (cancel_tx, mut cancel_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        // Set by the hook, before the agent starts and so before any event.
        let run_id: Arc<Mutex<Option<RunId>>> = Arc::default();
        let hook = {
            let manager = Arc::clone(self);
            let run_id = Arc::clone(&run_id);
            let cancel_tx = cancel_tx.clone();
            RunRecordedHook(Arc::new(move |thread: &ThreadId, run: &RunId| {
                *lock(&run_id) = Some(run.clone());
                manager.lock().runs.insert(
                    run.clone(),
                    LiveRun {
                        cancel: cancel_tx.clone(),
                        done: done_rx.clone(),
                    },
                );
                // The embedder's hook runs before `start` returns, so whatever it registers (e.g. the run with
                // an event hub) is in place when the caller learns the run id.
                let env = match &manager.agent_env {
                    Some(env) => env(thread, run),
                    None => Vec::new(),
                };
                if let Some(sender) = lock(&recorded_tx).take() {
                    let _ = sender.send(StartedRun {
                        thread_id: thread.clone(),
                        run_id: run.clone(),
                    });
                }
                Box::pin(std::future::ready(env))
            }))
        };
        let options = TurnOptions {
            cwd: request.cwd.clone(),
            on_run_recorded: Some(hook),
            ..self.options.clone()
        };
        let turn = TurnRequest {
            thread: request.thread.clone(),
            model: request.model.clone(),
            prompt: request.prompt.clone(),
            attachments: Vec::new(),
            title: request.title.clone(),
        };
        let (setup_tx, setup_rx) = oneshot::channel::<StartError>();
        let manager = Arc::clone(self);
        // `run_turn` is not `Send` (its observer need not be), so each detached run gets a thread with its own
        // current-thread runtime; runs are few and long, so a thread each costs nothing that matters.
        let run = move || async move {
            let events = Arc::clone(&manager.events);
            let mut observer = |event: &NormalizedEvent| {
                if let Some(run) = lock(&run_id).clone() {
                    events(&run, RunSignal::Event(event.clone()));
                }
            };
            let cancelled = async move {
                let _ = cancel_rx.wait_for(|c| *c).await;
            };
            let result =
                run_turn(&mut store, &agent, turn, &options, &mut observer, cancelled).await;
            let run = lock(&run_id).clone();
            match (result, run) {
                (Ok(report), _) => {
                    let run = report.run_id.clone();
                    manager.lock().runs.remove(&run);
                    events(&run, RunSignal::Ended(Box::new(report)));
                }
                (Err(error), Some(run)) => {
                    manager.lock().runs.remove(&run);
                    events(
                        &run,
                        RunSignal::StoreFailed {
                            code: error.code(),
                            message: error.to_string(),
                        },
                    );
                }
                (Err(error), None) => {
                    let _ = setup_tx.send(StartError::Setup(error));
                }
            }
            let _ = done_tx.send(true);
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        std::thread::Builder::new()
            .name("awp-host-run".to_owned())
            .spawn(move || runtime.block_on(run()))
            .map_err(StartError::Runtime)?;
        drop(cancel_tx);
        // The task either records the run (and sends its ids) or reports why it could not; it then drops the
        // other sender, so a closed channel is only "lost" when the other has nothing either.
        let mut setup_rx = setup_rx;
        tokio::select! {
            started = recorded_rx => match started {
                Ok(started) => Ok(started),
                Err(_) => Err((&mut setup_rx).await.unwrap_or(StartError::TaskLost)),
            },
            error = &mut setup_rx => Err(error.unwrap_or(StartError::TaskLost)),
        }
    }

    /// Requests cancellation of `run` (idempotent).
    pub fn cancel(&self, run: &RunId) -> CancelOutcome {
        match self.lock().runs.get(run) {
            Some(live) => {
                let _ = live.cancel.send(true);
                CancelOutcome::Requested
            }
            None => CancelOutcome::NotLive,
        }
    }

    /// Refuses new runs, cancels every live run and waits up to `grace` for their ends to be recorded.
    ///
    /// Returns the runs still live when `grace` ran out (their agents are killed when the runtime drops the
    /// tasks; the store marks them `interrupted` at the next open).
    pub async fn shutdown(&self, grace: Duration) -> Vec<RunId> {
        let waits: Vec<(RunId, watch::Receiver<bool>)> = {
            let mut live = self.lock();
            live.shutting_down = true;
            live.runs
                .iter()
                .map(|(id, run)| {
                    let _ = run.cancel.send(true);
                    (id.clone(), run.done.clone())
                })
                .collect()
        };
        let wait_all = async {
            for (_, mut done) in waits.clone() {
                let _ = done.wait_for(|d| *d).await;
            }
        };
        if tokio::time::timeout(grace, wait_all).await.is_ok() {
            Vec::new()
        } else {
            waits
                .into_iter()
                .filter(|(_, done)| !*done.borrow())
                .map(|(id, _)| id)
                .collect()
        }
    }
}

/// Locks `mutex`, keeping its data after a panic elsewhere (the data here stays consistent at every step).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
