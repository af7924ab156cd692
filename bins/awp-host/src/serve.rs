//! `awp-host serve`: the local control plane (`agentwire_host::control` over `agentwire_local_control`'s server),
//! the approvals console, the approver socket, with `--app DIR` the app bundle's tools on the control surface
//! (`tools.list`, `tools.call`) and on the task allow-list, and with `--tasks-listen` the managed-task API
//! (`agentwire_host::tasks`), until SIGINT/SIGTERM.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentwire_approval::{ApprovalEvent, ApprovalSnapshot, Renderer, RendererEvent, Resolution};
use agentwire_host::control::approver::ApproverSocket;
use agentwire_host::control::{ControlConfig, ControlError, ControlPlane};
use agentwire_host::store::escape_controls;
use agentwire_host::tasks::{
    API_KEY_VAR, AllowList, ApiConfig, ApiKey, ListenError, TaskLimits, TaskServer, TaskService,
    TaskStore, WorkerConfig,
};
use agentwire_host::{Store, StoreError, paths};
use agentwire_local_control::server::{Server, ServerConfig};
use agentwire_process::CancellationToken;

use crate::Failure;
use crate::cli::ServeArgs;
use crate::exit::Exit;

/// How long live runs get to record their end at shutdown.
const RUN_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn say(line: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::from_error(Exit::Protocol, "output_write_failed", &e))
}

/// Runs `serve`.
///
/// # Errors
/// A [`Failure`]: usage (2) for a bad address, key, allow-list entry or app bundle; 3 when another `serve` runs
/// for the data directory; 8 for a store or endpoint failure.
pub async fn serve(
    data_dir: Option<&Path>,
    config_dir: Option<&Path>,
    args: ServeArgs,
) -> Result<Exit, Failure> {
    let dir = paths::data_dir(data_dir, &|name: &str| std::env::var(name).ok())
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let registry = Arc::new(crate::commands::load_agents(config_dir)?);
    // Opening the store marks runs a crashed host left `running` as interrupted.
    let store = Store::open(&dir).map_err(|e| Failure::from_error(Exit::Protocol, e.code(), &e))?;
    for run in store.recovered_runs() {
        eprintln!(
            "awp-host: note: run {run} was cut off by a host that stopped; marked interrupted"
        );
    }
    drop(store);
    let mut tasks = match args.tasks_listen {
        Some(addr) => Some(prepare_tasks(&dir, addr, &args).await?),
        None => None,
    };

    let mut config = ControlConfig::new(&dir, env!("CARGO_PKG_VERSION"));
    config.deepchat_dir = crate::commands::deepchat_dir();
    config.app = args.app.clone();
    config.ocr.tesseract = args.ocr_tesseract.clone();
    config.ocr.language = args.ocr_language.clone();
    let plane = ControlPlane::open(config, registry)
        .await
        .map_err(|e| match e {
            ControlError::App(_) => Failure::from_error(Exit::Usage, e.code(), &e),
            _ => Failure::from_error(Exit::Protocol, e.code(), &e),
        })?;
    if let Some((_, _, _, allow)) = &mut tasks {
        // The declared drivers' binaries may run as tasks, as `--tasks-allow` entries do.
        for binary in plane
            .app()
            .map(|app| app.driver_binaries())
            .unwrap_or_default()
        {
            allow
                .add(&binary)
                .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
        }
        if allow.entries().next().is_none() {
            eprintln!(
                "awp-host: warning: no --tasks-allow and no app drivers: every task will fail with executable_not_allowed"
            );
        }
    }
    let server = Server::start(
        ServerConfig::new(&dir, env!("CARGO_PKG_VERSION")),
        plane.clone(),
    )
    .await
    .map_err(|e| {
        let exit = if e.code() == "already_running" {
            Exit::AgentUnavailable
        } else {
            Exit::Protocol
        };
        Failure::from_error(exit, e.code(), &e)
    })?;
    let shutdown = CancellationToken::new();
    cancel_on_signals(shutdown.clone())?;
    // Renderers (approver socket, console) stay attached until the requests and approvals have ended: a
    // renderer leaving first would deny a pending approval (fail closed) while its request is being ended as
    // `unavailable`, and which one the waiting `deepchat` saw would be a race.
    let renderers_stop = CancellationToken::new();
    let mut background = tokio::task::JoinSet::new();
    let mut approver_socket = None;
    if let Some(path) = &args.approvals_socket {
        let socket = ApproverSocket::bind(path)
            .await
            .map_err(|e| Failure::from_error(Exit::Usage, "approvals_socket", &e))?;
        eprintln!(
            "awp-host: approver socket {} (token in {})",
            path.display(),
            socket.token_path().display()
        );
        approver_socket = Some(tokio::spawn(
            socket.serve(plane.approvals().clone(), renderers_stop.clone()),
        ));
    }
    let console = match args.console.as_str() {
        "on" => true,
        "off" => false,
        _ => console_terminal(),
    };
    if console {
        // Attached here, before the listening line: a request after that line finds the console.
        background.spawn(approvals_console(
            plane.approvals().attach_renderer(),
            renderers_stop.clone(),
        ));
    }
    // Everything an operator or test may use is ready before the first line says so.
    say(&format!(
        "awp-host: local control listening on {}",
        server.layout().socket_path.display()
    ))?;
    if console {
        say("awp-host: approvals console: pending approvals appear here; answer y to allow")?;
    }

    if let Some((server, service, key, allow)) = tasks {
        say(&format!(
            "awp-host: tasks api listening on http://{}",
            server.local_addr()
        ))?;
        let workers = service.start_workers(
            allow,
            WorkerConfig {
                workers: args.tasks_workers,
                ..WorkerConfig::default()
            },
            shutdown.clone(),
        );
        let stop = shutdown.clone();
        background.spawn(async move {
            server.serve(service, key, ApiConfig::default(), stop).await;
            workers.join().await;
        });
    }

    shutdown.cancelled().await;
    eprintln!("awp-host: stopping");
    // The spec's order: stop accepting and end open requests (streams get a typed `unavailable` record), then
    // cancel live runs, close subscribers, cancel approvals; socket and descriptor are removed by the server.
    server.shutdown().await;
    plane.shutdown(RUN_SHUTDOWN_GRACE).await;
    renderers_stop.cancel();
    if let Some(socket) = approver_socket {
        // It removes its socket file and token file on its way out; give it that, not an abort.
        let _ = tokio::time::timeout(Duration::from_secs(5), socket).await;
    }
    background.shutdown().await;
    eprintln!("awp-host: serve stopped");
    Ok(Exit::Ok)
}

type Tasks = (TaskServer, TaskService, ApiKey, AllowList);

async fn prepare_tasks(
    dir: &Path,
    addr: std::net::SocketAddr,
    args: &ServeArgs,
) -> Result<Tasks, Failure> {
    let key = ApiKey::new(std::env::var(API_KEY_VAR).ok().as_deref())
        .map_err(|e| Failure::new(Exit::Usage, e.code(), e.to_string()))?;
    let allow = AllowList::new(&args.tasks_allow)
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let store = TaskStore::open(dir).map_err(|e| {
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
    let server = TaskServer::bind(addr, false)
        .await
        .map_err(|e: ListenError| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let service = TaskService::new(store, TaskLimits::default());
    Ok((server, service, key, allow))
}

/// Whether `--console auto` opens the console: stdin and stdout are terminals and this process is in the
/// terminal's foreground process group (a `serve &` in the background would be stopped by SIGTTIN on its first
/// read of the terminal).
fn console_terminal() -> bool {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() || !std::io::stdout().is_terminal() {
        return false;
    }
    rustix::termios::tcgetpgrp(&stdin).is_ok_and(|group| group == rustix::process::getpgrp())
}

/// Writes a console line to stdout; a closed stdout only loses the line (the console keeps answering).
fn show(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

/// One approval as the console shows it: id, method, effect and the redacted summary, escaped.
fn describe(approval: &ApprovalSnapshot) -> String {
    let effect = approval
        .display
        .get("effect")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    let summary = approval
        .display
        .get("summary")
        .map(ToString::to_string)
        .unwrap_or_default();
    let left = approval
        .expires_at
        .saturating_duration_since(std::time::Instant::now())
        .as_secs();
    format!(
        "approval {}: {} ({effect}) {} — allow? [y/N] (expires in {left}s)",
        approval.id,
        escape_controls(&approval.method, true),
        escape_controls(&summary, true),
    )
}

/// The terminal renderer: shows the oldest pending approval and takes `y` (allow) or anything else (deny) from
/// stdin, one line per approval.
async fn approvals_console(mut renderer: Renderer, shutdown: CancellationToken) {
    // Stdin is read on a plain thread: a read blocked in the terminal must not hold the runtime (and so the
    // process) open after shutdown, as tokio's stdin reader would.
    let mut lines = stdin_lines();
    let mut shown: Option<ApprovalSnapshot> = None;
    loop {
        if shown.is_none()
            && let Some(next) = renderer.pending().into_iter().next()
        {
            // On stdout, where the listening lines are: the console is the operator's view.
            show(&format!("awp-host: {}", describe(&next)));
            shown = Some(next);
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            event = renderer.next_event() => match event {
                None => return,
                Some(RendererEvent::Approval(ApprovalEvent::Decided { id, decision, .. })) => {
                    if shown.as_ref().is_some_and(|a| a.id == id) {
                        show(&format!("awp-host: approval {id} {}", decision.code()));
                        shown = None;
                    }
                }
                Some(_) => {}
            },
            line = lines.recv() => {
                let Some(line) = line else {
                    // stdin closed: nobody can answer here any more; detaching denies what is pending.
                    eprintln!("awp-host: approvals console closed (stdin ended)");
                    return;
                };
                let Some(approval) = shown.take() else { continue };
                let answer = line.trim();
                let resolution = if answer.eq_ignore_ascii_case("y") || answer.eq_ignore_ascii_case("yes") {
                    Resolution::Approve
                } else {
                    Resolution::Deny
                };
                match renderer.resolve(approval.id, &approval.scope, resolution) {
                    Ok(()) => show(&format!(
                        "awp-host: approval {} {}",
                        approval.id,
                        if resolution == Resolution::Approve { "allowed" } else { "denied" }
                    )),
                    Err(e) => show(&format!(
                        "awp-host: approval {} could not be answered: {}",
                        approval.id,
                        e.code()
                    )),
                }
            }
        }
    }
}

/// Lines of stdin, read by a detached thread (bounded to 4 KiB a line; longer lines are cut); the channel closes at
/// EOF or on a read error.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let spawned = std::thread::Builder::new()
        .name("approvals-console".to_owned())
        .spawn(move || {
            use std::io::{BufRead, Read};
            let mut stdin = std::io::stdin().lock();
            let mut line = Vec::new();
            loop {
                line.clear();
                match std::io::Read::by_ref(&mut stdin)
                    .take(4096)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if !line.ends_with(b"\n") && line.len() == 4096 {
                            // Skip the rest of an over-long line.
                            let mut rest = Vec::new();
                            if stdin.read_until(b'\n', &mut rest).is_err() {
                                return;
                            }
                        }
                        let text = String::from_utf8_lossy(&line).into_owned();
                        if tx.blocking_send(text).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    if spawned.is_err() {
        eprintln!("awp-host: the approvals console could not read stdin");
    }
    rx
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
