//! `awp-host serve`: the managed-task API and its worker pool until SIGINT/SIGTERM (`agentwire_host::tasks`).
//!
//! The local control plane and the approvals console of `serve` are not built yet; `--tasks-listen` is required.

use std::io::Write;
use std::path::Path;

use agentwire_host::tasks::{
    API_KEY_VAR, AllowList, ApiConfig, ApiKey, ListenError, TaskLimits, TaskServer, TaskService,
    TaskStore, WorkerConfig,
};
use agentwire_host::{StoreError, paths};
use agentwire_process::CancellationToken;

use crate::Failure;
use crate::cli::ServeArgs;
use crate::exit::Exit;

/// Runs `serve`.
///
/// # Errors
/// A [`Failure`]: usage (2) for a bad address, key or allow-list entry; 3 when another `serve` holds the data
/// directory; 8 for a store failure.
pub async fn serve(data_dir: Option<&Path>, args: ServeArgs) -> Result<Exit, Failure> {
    let key = ApiKey::new(std::env::var(API_KEY_VAR).ok().as_deref())
        .map_err(|e| Failure::new(Exit::Usage, e.code(), e.to_string()))?;
    let allow = AllowList::new(&args.tasks_allow)
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    if args.tasks_allow.is_empty() {
        eprintln!(
            "awp-host: warning: no --tasks-allow given: every task will fail with executable_not_allowed"
        );
    }
    let dir = paths::data_dir(data_dir, &|name: &str| std::env::var(name).ok())
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let store = TaskStore::open(&dir).map_err(|e| {
        let exit = match e {
            StoreError::TasksBusy => Exit::AgentUnavailable,
            _ => Exit::Protocol,
        };
        Failure::from_error(exit, e.code(), &e)
    })?;
    for task in store.lost_tasks() {
        eprintln!(
            "awp-host: note: task {task} was running when the previous serve stopped; marked lost (not re-run)"
        );
    }
    let server = TaskServer::bind(args.tasks_listen, false)
        .await
        .map_err(|e: ListenError| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let shutdown = CancellationToken::new();
    cancel_on_signals(shutdown.clone())?;
    let service = TaskService::new(store, TaskLimits::default());
    let workers = service.start_workers(
        allow,
        WorkerConfig {
            workers: args.tasks_workers,
            ..WorkerConfig::default()
        },
        shutdown.clone(),
    );
    {
        let mut stdout = std::io::stdout().lock();
        let announced = writeln!(
            stdout,
            "awp-host: tasks api listening on http://{}",
            server.local_addr()
        )
        .and_then(|()| stdout.flush());
        if let Err(e) = announced {
            return Err(Failure::from_error(
                Exit::Protocol,
                "output_write_failed",
                &e,
            ));
        }
    }
    server
        .serve(service, key, ApiConfig::default(), shutdown.clone())
        .await;
    workers.join().await;
    eprintln!("awp-host: serve stopped");
    Ok(Exit::Ok)
}

/// Cancels `shutdown` at the first SIGINT, SIGTERM or SIGHUP (as `chat` treats them alike).
fn cancel_on_signals(shutdown: CancellationToken) -> Result<(), Failure> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let make = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::from_error(Exit::Protocol, "signal_handler", &e))
        };
        let mut interrupt = make(SignalKind::interrupt())?;
        let mut terminate = make(SignalKind::terminate())?;
        let mut hangup = make(SignalKind::hangup())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
                _ = hangup.recv() => {}
            }
            eprintln!("awp-host: stopping (running tasks are stopped and recorded lost)");
            shutdown.cancel();
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            shutdown.cancel();
        }
    });
    Ok(())
}
