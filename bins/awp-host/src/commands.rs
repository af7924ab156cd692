//! Subcommand implementations: wiring of `agentwire-host` (store, agents, turn runner) to the terminal.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::Duration;

use agentwire_host::agents::{AgentEntry, AgentRegistry};
use agentwire_host::attachments::{AttachmentLimits, read_attachments};
use agentwire_host::control::ChatAgentToken;
use agentwire_host::export::{
    format_cost, format_ms, message_json, run_json, thread_json, total_cost,
};
use agentwire_host::store::{ThreadDetail, escape_controls};
use agentwire_host::turn::{TurnOptions, TurnRequest, TurnSetupError, run_turn};
use agentwire_host::{AgentError, RunStatus, Store, StoreError, paths};
use serde_json::{Value, json};

use crate::Failure;
use crate::cli::{AgentsCommand, ChatArgs, CheckArgs, Cli, Command, ThreadsCommand};
use crate::exit::Exit;
use crate::render::{Format, Renderer, failure_message, status_line};

/// Maximum prompt size, from stdin or the arguments (joined with spaces), in bytes (1 MiB). One byte more is a
/// usage error (exit 2, `prompt_too_large`).
pub const MAX_STDIN_PROMPT_BYTES: u64 = 1024 * 1024;

fn env_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Runs the parsed command line.
///
/// # Errors
/// A [`Failure`] to print, with its exit status.
pub async fn run(cli: Cli) -> Result<Exit, Failure> {
    match cli.command {
        Command::Chat(args) => chat(cli.data_dir.as_deref(), cli.config_dir.as_deref(), args).await,
        Command::Threads(cmd) => threads(cli.data_dir.as_deref(), cmd),
        Command::Agents(AgentsCommand::List { json }) => {
            agents_list(cli.data_dir.as_deref(), cli.config_dir.as_deref(), json)
        }
        Command::Check(args) => {
            check(cli.data_dir.as_deref(), cli.config_dir.as_deref(), args).await
        }
        Command::Tools(cmd) => crate::tools::run(cmd).await,
        Command::Serve(args) => {
            crate::serve::serve(cli.data_dir.as_deref(), cli.config_dir.as_deref(), args).await
        }
    }
}

fn open_store(flag: Option<&Path>) -> Result<Store, Failure> {
    let dir = paths::data_dir(flag, &env_lookup)
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let store = Store::open(&dir).map_err(|e| store_failure(&e))?;
    for run in store.recovered_runs() {
        eprintln!(
            "awp-host: note: run {run} was left running by a host that stopped; marked interrupted"
        );
    }
    Ok(store)
}

fn store_failure(e: &StoreError) -> Failure {
    let exit = match e {
        StoreError::ThreadNotFound(_)
        | StoreError::ThreadPrefixNotFound(_)
        | StoreError::ThreadAmbiguous { .. }
        | StoreError::NoThreads
        | StoreError::InvalidTitle(_)
        | StoreError::Id(
            agentwire_host::IdError::Malformed { .. }
            | agentwire_host::IdError::MalformedReference { .. },
        ) => Exit::Usage,
        StoreError::ThreadBusy { .. } => Exit::AgentUnavailable,
        _ => Exit::Protocol,
    };
    Failure::from_error(exit, e.code(), e)
}

/// The directory of the `deepchat` binary when it sits next to `awp-host` (prepended to agents' `PATH`).
pub(crate) fn deepchat_dir() -> Option<std::path::PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .filter(|bin| bin.join("deepchat").is_file())
}

pub(crate) fn load_agents(flag: Option<&Path>) -> Result<AgentRegistry, Failure> {
    let dir = paths::config_dir(flag, &env_lookup)
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    AgentRegistry::load(&dir, &env_lookup, exe_dir.as_deref())
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))
}

fn usage(code: &str, message: impl Into<String>) -> Failure {
    Failure::new(Exit::Usage, code, message)
}

fn read_prompt(args: &[String]) -> Result<String, Failure> {
    let from_stdin = match args {
        [dash] if dash == "-" => true,
        [] => {
            if std::io::stdin().is_terminal() {
                return Err(usage(
                    "prompt_missing",
                    "no prompt given (pass PROMPT, or `-` to read stdin)",
                ));
            }
            true
        }
        _ => false,
    };
    if !from_stdin {
        let prompt = args.join(" ");
        if prompt.len() as u64 > MAX_STDIN_PROMPT_BYTES {
            return Err(usage(
                "prompt_too_large",
                format!("the prompt is larger than {MAX_STDIN_PROMPT_BYTES} bytes"),
            ));
        }
        return Ok(prompt);
    }
    // Room for the limit, a trailing `\r\n`, and one byte more to see that it is over.
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_STDIN_PROMPT_BYTES + 3)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::from_error(Exit::Usage, "prompt_unreadable", &e))?;
    // The newline that ends the last line (`echo`, a here-doc) is not part of the prompt: drop exactly one,
    // before the size check (a 1 MiB prompt piped with its newline is within the limit).
    if bytes.ends_with(b"\r\n") {
        bytes.truncate(bytes.len() - 2);
    } else if bytes.ends_with(b"\n") {
        bytes.truncate(bytes.len() - 1);
    }
    if bytes.len() as u64 > MAX_STDIN_PROMPT_BYTES {
        return Err(usage(
            "prompt_too_large",
            format!("the prompt on stdin is larger than {MAX_STDIN_PROMPT_BYTES} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| usage("prompt_not_utf8", "the prompt on stdin is not valid UTF-8"))
}

/// Signals that end a chat: SIGINT (Ctrl-C), SIGTERM and SIGHUP are handled alike.
///
/// The first one cancels the turn (the returned future resolves: stop ladder, run recorded `cancelled`, exit 7).
/// A second one sets the abort flag: the turn runner kills the agent's process group with SIGKILL at once, and
/// the chat exits 130. Should the runner not return within [`ABORT_EXIT_AFTER`], the process exits 130 anyway
/// (the agent's group was killed by then unless the runner is stuck outside the agent).
fn cancel_on_signals() -> Result<
    (
        impl std::future::Future<Output = ()>,
        tokio::sync::watch::Receiver<bool>,
    ),
    Failure,
> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (abort_tx, abort_rx) = tokio::sync::watch::channel(false);
    #[cfg(unix)]
    let mut signals = {
        use tokio::signal::unix::{SignalKind, signal};
        let make = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::from_error(Exit::Protocol, "signal_handler", &e))
        };
        (
            make(SignalKind::interrupt())?,
            make(SignalKind::terminate())?,
            make(SignalKind::hangup())?,
        )
    };
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut next = async || {
            tokio::select! {
                s = signals.0.recv() => s.is_some(),
                s = signals.1.recv() => s.is_some(),
                s = signals.2.recv() => s.is_some(),
            }
        };
        #[cfg(not(unix))]
        let next = async || tokio::signal::ctrl_c().await.is_ok();
        if !next().await {
            return;
        }
        eprintln!("\nawp-host: cancelling the turn (press Ctrl-C again to exit now)");
        if tx.send(()).is_err() {
            // The turn is already over; nothing to cancel.
        }
        if next().await {
            eprintln!("awp-host: interrupted");
            if abort_tx.send(true).is_err() {
                // The turn is over: nothing to kill.
                std::process::exit(i32::from(Exit::Interrupted.code()));
            }
            tokio::time::sleep(ABORT_EXIT_AFTER).await;
            std::process::exit(i32::from(Exit::Interrupted.code()));
        }
    });
    let cancel = async move {
        if rx.await.is_err() {
            // The signal task ended without a signal: never cancel.
            std::future::pending::<()>().await;
        }
    };
    Ok((cancel, abort_rx))
}

/// How long after a second signal the process exits 130 even if the turn runner has not returned.
const ABORT_EXIT_AFTER: Duration = Duration::from_secs(5);

/// The working directory a new thread records: `--cwd DIR` (canonical; must be a directory), else the current
/// directory.
fn chat_cwd(flag: Option<&Path>) -> Result<std::path::PathBuf, Failure> {
    match flag {
        Some(dir) => match std::fs::canonicalize(dir) {
            Ok(path) if path.is_dir() => Ok(path),
            Ok(path) => Err(usage(
                "cwd_invalid",
                format!("--cwd {}: not a directory", path.display()),
            )),
            Err(e) => Err(usage(
                "cwd_invalid",
                format!("--cwd {}: {}", dir.display(), crate::error_chain(&e)),
            )),
        },
        None => std::env::current_dir()
            .map_err(|e| Failure::from_error(Exit::Usage, "current_dir_unavailable", &e)),
    }
}

async fn chat(
    data_dir: Option<&Path>,
    config_dir: Option<&Path>,
    args: ChatArgs,
) -> Result<Exit, Failure> {
    let format = if args.json {
        Format::Json
    } else if args.jsonl {
        Format::Jsonl
    } else {
        Format::Human
    };
    // No prompt on a terminal: an interactive session (human output only; --json/--jsonl keep the error).
    let interactive =
        args.prompt.is_empty() && format == Format::Human && std::io::stdin().is_terminal();
    let prompt = if interactive {
        String::new()
    } else {
        read_prompt(&args.prompt)?
    };
    let attachments = read_attachments(&args.attach, &AttachmentLimits::default())
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let mut store = open_store(data_dir)?;
    let thread = if args.continue_latest {
        Some(store.latest_thread().map_err(|e| store_failure(&e))?.id)
    } else {
        match &args.thread {
            Some(id) => Some(store.resolve_thread(id).map_err(|e| store_failure(&e))?),
            None => None,
        }
    };
    let registry = load_agents(config_dir)?;
    let thread_agent = match &thread {
        Some(id) => Some(
            store
                .thread(id)
                .map_err(|e| store_failure(&e))?
                .ok_or_else(|| store_failure(&StoreError::ThreadNotFound(id.clone())))?
                .agent,
        ),
        None => None,
    };
    let agent_name = args.agent.as_deref().or(thread_agent.as_deref());
    let agent = registry.resolve(agent_name).map_err(|e| {
        // The thread's own agent is gone from the configuration: say so, and what can be done.
        if let (AgentError::NotFound { name }, None, Some(id)) = (&e, &args.agent, &thread) {
            return usage(
                e.code(),
                format!(
                    "thread {id} belongs to agent `{name}`, which is no longer configured (see `awp-host agents \
                     list`); add `{name}` back to agents.toml to continue this thread, or start a new thread \
                     with `awp-host chat --new --agent NAME`"
                ),
            );
        }
        let exit = match e {
            AgentError::NotFound { .. } => Exit::Usage,
            _ => Exit::AgentUnavailable,
        };
        Failure::from_error(exit, e.code(), &e)
    })?;
    use agentwire_host::launch_extras::LaunchExtrasError;
    let extras = agentwire_host::launch_extras::LaunchExtras {
        system_prompt: args.system.clone(),
        agent_args: args.agent_args.clone(),
    };
    let agent = &extras.apply(agent).map_err(|e| {
        // A remote URL breaks the agent's launch rules, as in its configured args.
        let exit = match e {
            LaunchExtrasError::RemoteUrl { .. } => Exit::AgentUnavailable,
            _ => Exit::Usage,
        };
        Failure::from_error(exit, e.code(), &e)
    })?;
    let cwd = chat_cwd(args.cwd.as_deref())?;
    let options = TurnOptions {
        idle_timeout: args.idle_timeout,
        first_output_timeout: args.first_output_timeout,
        cwd: Some(cwd),
        acp_permissions: crate::acp::permissions(args.yes),
        tool_permissions: crate::acp::tool_permissions(args.yes),
        ..TurnOptions::default()
    };
    if interactive {
        let dir = paths::data_dir(data_dir, &env_lookup)
            .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
        let agent_token = ChatAgentToken::discover(&dir, deepchat_dir());
        let options = TurnOptions {
            on_run_recorded: Some(agent_token.hook()),
            ..options
        };
        let session = crate::interactive::Session {
            agent,
            options,
            thread,
            model: args.model.clone(),
            attachments,
            data_dir: dir,
        };
        let result = crate::interactive::run(&mut store, session).await;
        agent_token.revoke().await;
        return result;
    }
    let (cancel, abort) = cancel_on_signals()?;
    // With a `serve` running for this data dir, the agent gets a run-scoped DEEPCHAT_CLI_AGENT_TOKEN.
    let dir = paths::data_dir(data_dir, &env_lookup)
        .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
    let agent_token = ChatAgentToken::discover(&dir, deepchat_dir());
    let options = TurnOptions {
        abort: Some(abort.clone()),
        on_run_recorded: Some(agent_token.hook()),
        ..options
    };
    let request = TurnRequest {
        thread,
        model: args.model.clone(),
        prompt,
        attachments,
        title: None,
    };
    let stdout = std::io::stdout();
    let mut renderer = Renderer::new(format, stdout.lock());
    let result = run_turn(
        &mut store,
        agent,
        request,
        &options,
        &mut |event| renderer.event(event),
        cancel,
    )
    .await;
    agent_token.revoke().await;
    let report = result.map_err(|e| {
        let exit = match &e {
            TurnSetupError::Launch { .. }
            | TurnSetupError::ThreadCwdMissing { .. }
            | TurnSetupError::Provider { .. }
            | TurnSetupError::ThreadCwdReplaced { .. } => Exit::AgentUnavailable,
            TurnSetupError::ThreadAgentMismatch { .. }
            | TurnSetupError::EmptyPrompt
            | TurnSetupError::CwdNotUtf8(_) => Exit::Usage,
            TurnSetupError::Store(s) => return store_failure(s),
            _ => Exit::Protocol,
        };
        Failure::from_error(exit, e.code(), &e)
    })?;
    // A second signal (abort) ends here too: the run was recorded (`cancelled`, code `aborted`), and the status
    // line and error below say which thread and run it was; the exit is 130.
    renderer.finish(&report);
    if let Some(e) = renderer.take_error() {
        // The turn itself was recorded: say where, since stdout (e.g. `| head`) may be gone.
        return Err(Failure::new(
            Exit::Protocol,
            "output_write_failed",
            format!(
                "writing the output failed: {}; the turn was recorded as thread {}, run {}, status {}",
                crate::error_chain(&e),
                report.thread_id,
                report.run_id,
                report.status.as_str()
            ),
        ));
    }
    drop(renderer);
    if format == Format::Human {
        eprintln!("{}", status_line(&report));
    }
    match (&report.status, &report.error_code) {
        (RunStatus::Succeeded, _) => Ok(Exit::Ok),
        (_, code) => {
            let code = code.as_deref().unwrap_or("turn_failed");
            let mut message = failure_message(code, report.error_detail.as_deref(), agent);
            if let Some(reason) = &report.error_reason {
                message.push_str(&format!(" — the agent said: {reason}"));
            }
            if code == agentwire_host::turn::ABORTED_CODE {
                // Exiting at once: say where the run was recorded, whatever the output format.
                message.push_str(&format!(
                    "; recorded as thread {}, run {}",
                    report.thread_id, report.run_id
                ));
            }
            // `--json`/`--jsonl` printed the run's result record (with its error) already.
            Err(Failure::new(Exit::for_turn_code(code), code, message).printed_as_json())
        }
    }
}

pub(crate) fn print_out(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::from_error(Exit::Protocol, "output_write_failed", &e))
}

fn detail_json(d: &ThreadDetail) -> Value {
    json!({
        "thread": thread_json(&d.thread),
        "messages": d.messages.iter().map(message_json).collect::<Vec<_>>(),
        "runs": d.runs.iter().map(run_json).collect::<Vec<_>>(),
        "sessions": d.sessions.iter().map(|s| json!({
            "session_id": s.session_id,
            "run_id": s.run_id.as_str(),
            "first_seen_at": format_ms(s.first_seen_at_ms),
        })).collect::<Vec<_>>(),
    })
}

fn threads(data_dir: Option<&Path>, cmd: ThreadsCommand) -> Result<Exit, Failure> {
    let mut store = open_store(data_dir)?;
    match cmd {
        ThreadsCommand::List { json, limit } => {
            let list = store.list_threads(limit).map_err(|e| store_failure(&e))?;
            let total = if list.len() < limit {
                list.len() as u64
            } else {
                store.count_threads().map_err(|e| store_failure(&e))?
            };
            let more = total.saturating_sub(list.len() as u64);
            if json {
                let value = Value::Array(list.iter().map(thread_json).collect());
                print_out(&format!("{value}\n"))?;
            } else if list.is_empty() {
                print_out("no threads yet (start one with `awp-host chat PROMPT`)\n")?;
            } else {
                let mut rows = vec![
                    [
                        "ID",
                        "AGENT",
                        "RUNS",
                        "LAST",
                        "UPDATED",
                        "DIRECTORY",
                        "TITLE",
                    ]
                    .map(String::from),
                ];
                rows.extend(list.iter().map(|t| {
                    [
                        t.id.to_string(),
                        line(&t.agent),
                        t.run_count.to_string(),
                        t.last_run_status.map_or("-", RunStatus::as_str).to_owned(),
                        format_ms(t.updated_at_ms),
                        line(t.cwd.as_deref().unwrap_or("-")),
                        line(&t.title),
                    ]
                }));
                let mut text = table(&rows, &[false, false, true, false, false, false, false]);
                if more > 0 {
                    text.push_str(&format!("({more} more; use --limit)\n"));
                }
                print_out(&text)?;
            }
        }
        ThreadsCommand::Show { id, json } => {
            let id = store.resolve_thread(&id).map_err(|e| store_failure(&e))?;
            let detail = store.thread_detail(&id).map_err(|e| store_failure(&e))?;
            if json {
                print_out(&format!("{}\n", detail_json(&detail)))?;
            } else {
                print_out(&detail_text(&detail))?;
            }
        }
        ThreadsCommand::Delete { id, json } => {
            let id = store.resolve_thread(&id).map_err(|e| store_failure(&e))?;
            let deleted = store.delete_thread(&id).map_err(|e| store_failure(&e))?;
            if json {
                let value = json!({"deleted": {
                    "id": deleted.id.as_str(),
                    "runs": deleted.runs,
                    "messages": deleted.messages,
                }});
                print_out(&format!("{value}\n"))?;
            } else {
                print_out(&format!(
                    "deleted thread {} ({} runs, {} messages)\n",
                    deleted.id, deleted.runs, deleted.messages
                ))?;
            }
        }
        ThreadsCommand::Rename { id, title, json } => {
            let id = store.resolve_thread(&id).map_err(|e| store_failure(&e))?;
            store
                .rename_thread(&id, &title.join(" "))
                .map_err(|e| store_failure(&e))?;
            let thread = store
                .thread(&id)
                .map_err(|e| store_failure(&e))?
                .ok_or_else(|| store_failure(&StoreError::ThreadNotFound(id.clone())))?;
            if json {
                print_out(&format!("{}\n", thread_json(&thread)))?;
            } else {
                print_out(&format!(
                    "renamed thread {}: {}\n",
                    thread.id,
                    line(&thread.title)
                ))?;
            }
        }
        ThreadsCommand::Export { id, format, .. } => {
            let id = store.resolve_thread(&id).map_err(|e| store_failure(&e))?;
            let detail = store.thread_detail(&id).map_err(|e| store_failure(&e))?;
            let text = if format == "jsonl" {
                agentwire_host::export::jsonl(&detail)
            } else {
                agentwire_host::export::markdown(&detail)
            };
            print_out(&text)?;
        }
    }
    Ok(Exit::Ok)
}

/// A single-line field for human output (controls, bidi overrides and line separators escaped).
pub(crate) fn line(text: &str) -> String {
    escape_controls(text, true).into_owned()
}

/// Rows as columns separated by two spaces, each as wide as its widest cell (in characters; the last column is
/// not padded); `right[i]` right-aligns column `i`.
pub(crate) fn table<const N: usize>(rows: &[[String; N]], right: &[bool; N]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut cells = Vec::with_capacity(N);
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i + 1 == N {
                cells.push(cell.clone());
            } else if right[i] {
                cells.push(format!("{}{cell}", " ".repeat(pad)));
            } else {
                cells.push(format!("{cell}{}", " ".repeat(pad)));
            }
        }
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn detail_text(d: &ThreadDetail) -> String {
    let t = &d.thread;
    let mut s = format!(
        "thread {}  agent {}  session {}\ntitle: {}\ndirectory: {}\ncreated {}  updated {}\n",
        t.id,
        line(&t.agent),
        line(t.session_id.as_deref().unwrap_or("-")),
        line(&t.title),
        match t.cwd.as_deref() {
            Some(dir) =>
                match agentwire_host::turn::check_thread_cwd(&t.id, dir.into(), t.cwd_identity,) {
                    Ok(_) => line(dir),
                    Err(TurnSetupError::ThreadCwdReplaced { what, .. }) => format!(
                        "{} ({}: the next turn will be refused)",
                        line(dir),
                        line(&what)
                    ),
                    Err(_) => format!("{} (gone: the next turn will be refused)", line(dir)),
                },
            None => "- (not recorded: turns run in the current directory)".to_owned(),
        },
        format_ms(t.created_at_ms),
        format_ms(t.updated_at_ms)
    );
    s.push_str("\nmessages:\n");
    for m in &d.messages {
        s.push_str(&format!("[{}] ({})\n", m.role.as_str(), m.run_id));
        let content = escape_controls(&m.content, false);
        s.push_str(&content);
        if !content.ends_with('\n') {
            s.push('\n');
        }
    }
    s.push_str("\nruns:\n");
    for r in &d.runs {
        let usage = r
            .usage
            .as_ref()
            .map(|u| format!("{} in / {} out", u.input_tokens, u.output_tokens));
        s.push_str(&format!(
            "{}  {:<11}  {}  {}{}{}\n",
            r.id,
            r.status.as_str(),
            format_ms(r.started_at_ms),
            usage.unwrap_or_else(|| "-".into()),
            r.total_cost_usd
                .map(|c| format!("  {}", format_cost(c)))
                .unwrap_or_default(),
            r.error_code
                .as_ref()
                .map(|c| format!("  error {}", line(c)))
                .unwrap_or_default()
        ));
        if let Some(reason) = &r.error_reason {
            s.push_str(&format!("    why: {}\n", line(reason)));
        }
    }
    if let Some(total) = total_cost(&d.runs) {
        s.push_str(&format!("total cost: {}\n", format_cost(total)));
    }
    s.push_str("\nsession ids (oldest first):\n");
    for sess in &d.sessions {
        s.push_str(&format!(
            "{}  (first seen in {})\n",
            line(&sess.session_id),
            sess.run_id
        ));
    }
    s
}

/// Why a well-formed entry still cannot start: its host provider (`provider = "…"`) cannot be used (unknown,
/// disabled, no enabled model, a remote URL without opt-in), checked as a launch checks it. `None` when usable,
/// without a provider, or when no data directory is known (nothing to check against).
fn provider_problem(
    data_dir: Option<&Path>,
    e: &AgentEntry,
) -> Option<agentwire_host::providers::ProviderError> {
    let spec = e.status.as_ref().ok()?;
    let provider = spec.provider.as_deref()?;
    let dir = data_dir?;
    agentwire_host::providers::agent_env(
        dir,
        provider,
        spec.launch.default_model.as_deref(),
        spec.launch.remote_api_opt_in,
    )
    .err()
}

fn entry_json(
    e: &AgentEntry,
    is_default: bool,
    provider: Option<&agentwire_host::providers::ProviderError>,
) -> Value {
    let error = match (&e.status, provider) {
        (Err(err), _) => Some(json!({"code": err.code(), "message": err.to_string()})),
        (Ok(_), Some(err)) => Some(json!({
            "code": err.code(),
            "message": format!("agent `{}` cannot use its provider: {err}", e.name),
        })),
        (Ok(_), None) => None,
    };
    json!({
        "name": e.name,
        "source": e.source.as_str(),
        "protocol": e.protocol,
        "executable": e.executable.as_ref().map(|p| p.display().to_string()),
        "resolved_executable": e.resolved_executable.as_ref().map(|p| p.display().to_string()),
        "model": e.model,
        "provider": e.status.as_ref().ok().and_then(|spec| spec.provider.clone()),
        "line": e.location.map(|(line, _)| line),
        "column": e.location.map(|(_, column)| column),
        "default": is_default,
        "usable": e.is_usable() && provider.is_none(),
        "error": error,
    })
}

fn agents_list(
    data_dir: Option<&Path>,
    config_dir: Option<&Path>,
    json: bool,
) -> Result<Exit, Failure> {
    let registry = load_agents(config_dir)?;
    let data_dir = paths::data_dir(data_dir, &env_lookup).ok();
    if json {
        let value = Value::Array(
            registry
                .entries()
                .iter()
                .map(|e| {
                    let provider = provider_problem(data_dir.as_deref(), e);
                    entry_json(e, registry.is_default(e), provider.as_ref())
                })
                .collect(),
        );
        print_out(&format!("{value}\n"))?;
        return Ok(Exit::Ok);
    }
    let mut rows = vec![["  NAME", "PROTOCOL", "MODEL", "EXECUTABLE", "STATUS"].map(String::from)];
    for e in registry.entries() {
        let at = e
            .location
            .map(|(line, column)| {
                format!("{}:{line}:{column}: ", agentwire_host::agents::CONFIG_FILE)
            })
            .unwrap_or_default();
        let status = match (&e.status, provider_problem(data_dir.as_deref(), e)) {
            (Ok(_), None) => "usable".to_owned(),
            (Ok(_), Some(err)) => {
                format!("unusable: cannot use its provider: {err} ({})", err.code())
            }
            (Err(err), _) => format!("unusable: {at}{err} ({})", err.code()),
        };
        let executable = match (&e.executable, &e.resolved_executable) {
            (Some(link), Some(file)) => format!("{} -> {}", link.display(), file.display()),
            (Some(path), None) => path.display().to_string(),
            (None, _) => "-".to_owned(),
        };
        rows.push([
            format!(
                "{} {}",
                if registry.is_default(e) { '*' } else { ' ' },
                line(&e.name)
            ),
            line(e.protocol.as_deref().unwrap_or("-")),
            line(&match (
                e.model.as_deref(),
                e.status
                    .as_ref()
                    .ok()
                    .and_then(|spec| spec.provider.as_deref()),
            ) {
                (model, Some(provider)) => {
                    format!("{} (provider {provider})", model.unwrap_or("-"))
                }
                (model, None) => model.unwrap_or("-").to_owned(),
            }),
            line(&executable),
            line(&status),
        ]);
    }
    let mut text = table(&rows, &[false; 5]);
    text.push_str("(* = default agent)\n");
    print_out(&text)?;
    Ok(Exit::Ok)
}

/// Launch-rule evidence in the terms of a `check -- CMD ARGS…` command line: the engine describes launch
/// failures with the `AWP_AGENT_CLI_*` variables, which the user did not set.
fn command_line_terms(evidence: &str) -> String {
    [
        (
            "set AWP_AGENT_REMOTE_API_OPT_IN=1 to allow it",
            "pass --remote-api-opt-in (or set AWP_AGENT_REMOTE_API_OPT_IN=1) to allow it",
        ),
        (
            "AWP_AGENT_CLI_ARGS_JSON argument",
            "the command's argument (0-based, after the executable)",
        ),
        ("AWP_AGENT_CLI_ARGS_JSON", "the command's arguments"),
        ("AWP_AGENT_CLI_EXECUTABLE", "the command's executable"),
        ("AWP_AGENT_CLI_ENV_JSON", "the agent's environment"),
    ]
    .iter()
    .fold(evidence.to_owned(), |text, (from, to)| {
        text.replace(from, to)
    })
}

/// `awp-host check`: the agent from `-- CMD ARGS…` or `--agent NAME`, plus every `--env`, checked with the AWP or
/// ACP engine.
async fn check(
    data_dir: Option<&Path>,
    config_dir: Option<&Path>,
    args: CheckArgs,
) -> Result<Exit, Failure> {
    use agentwire_awp::conformance::{CheckPlan, Outcome, run_check};
    let (mut launch, is_acp, named) = match &args.agent {
        Some(name) => {
            let registry = load_agents(config_dir)?;
            let agent = registry.resolve(Some(name)).map_err(|e| {
                let exit = match e {
                    AgentError::NotFound { .. } => Exit::Usage,
                    _ => Exit::AgentUnavailable,
                };
                Failure::from_error(exit, e.code(), &e)
            })?;
            // As `chat` launches it (`--include-partial-messages` for a stream-json agent, unless turned off),
            // except `--permission-prompt-tool stdio`: the check does not speak the control protocol, so nobody
            // would answer the agent's `can_use_tool` requests.
            let mut launch = agent.launch.clone();
            // An agent using a host provider gets its URL, model and key as `chat` gives them.
            if let Some(provider) = &agent.provider {
                let dir = paths::data_dir(data_dir, &env_lookup)
                    .map_err(|e| Failure::from_error(Exit::Usage, e.code(), &e))?;
                let model = args.model.as_deref().or(launch.default_model.as_deref());
                let env = agentwire_host::providers::agent_env(
                    &dir,
                    provider,
                    model,
                    launch.remote_api_opt_in,
                )
                .map_err(|e| Failure::from_error(Exit::AgentUnavailable, e.code(), &e))?;
                launch.env.extend(env);
            }
            let permission_args = agentwire_awp::control::PERMISSION_PROMPT_TOOL_ARGS;
            launch.prefix_args.extend(
                agent
                    .extra_args()
                    .into_iter()
                    .filter(|a| !permission_args.contains(a))
                    .map(str::to_owned),
            );
            (
                launch,
                agent.protocol == agentwire_host::agents::AgentProtocol::Acp,
                Some((agent.max_line_bytes, agent.source)),
            )
        }
        None => {
            let Some((program, rest)) = args.command.split_first() else {
                return Err(usage(
                    "command_missing",
                    "no agent command given after `--` (or --agent NAME)",
                ));
            };
            let mut executable = std::path::PathBuf::from(program);
            if executable.is_relative() {
                let cwd = std::env::current_dir()
                    .map_err(|e| Failure::from_error(Exit::Usage, "current_dir_unavailable", &e))?;
                executable = cwd.join(executable);
            }
            let mut launch = agentwire_awp::LaunchConfig::new(executable);
            launch.prefix_args = rest.to_vec();
            let is_acp = args.protocol == "acp";
            if !is_acp {
                launch.protocol =
                    args.protocol
                        .parse()
                        .map_err(|e: agentwire_awp::LaunchError| {
                            Failure::from_error(Exit::Usage, e.code(), &e)
                        })?;
            }
            launch.remote_api_opt_in = args.remote_api_opt_in
                || env_lookup(agentwire_awp::launch::VAR_REMOTE_API_OPT_IN).as_deref() == Some("1");
            (launch, is_acp, None)
        }
    };
    let (max_line_bytes, source) = (named.map(|n| n.0), named.map(|n| n.1));
    launch.env.extend(args.env.iter().cloned());
    if is_acp {
        return crate::acp::check(&launch, args.timeout, max_line_bytes, args.json).await;
    }
    let mut plan = CheckPlan::new(launch);
    plan.model = args.model;
    if let Some(timeout) = args.timeout {
        plan.limits.turn_timeout = timeout;
    }
    if let Some(max_line_bytes) = max_line_bytes {
        plan.limits.max_line_bytes = max_line_bytes;
    }
    let mut report = run_check(plan).await;
    for rule in &mut report.rules {
        if let Outcome::Fail { evidence } = &mut rule.outcome {
            // Phrased for where the agent is defined: its agents.toml fields (`--remote-api-opt-in` does
            // not apply to `--agent`), or the command line.
            *evidence = match source {
                Some(source) => agentwire_host::agents::in_source_terms(evidence, source),
                None => command_line_terms(evidence),
            };
        }
    }
    if args.json {
        let value = serde_json::to_value(&report)
            .map_err(|e| Failure::from_error(Exit::Protocol, "internal", &e))?;
        print_out(&format!("{value}\n"))?;
    } else {
        print_out(&report.render_text())?;
    }
    if report.passed() {
        return Ok(Exit::Ok);
    }
    let not_started = ["launch_contract", "spawns"].iter().any(|id| {
        report
            .get(id)
            .is_some_and(|r| matches!(r.outcome, Outcome::Fail { .. }))
    });
    // The report (printed above) is the one JSON object of `--json`.
    if not_started {
        Err(Failure::new(
            Exit::AgentUnavailable,
            "agent_unavailable",
            "the agent could not be launched",
        )
        .printed_as_json())
    } else {
        let failed = report.failed_ids().join(", ");
        Err(Failure::new(
            Exit::Protocol,
            "check_failed",
            format!("the agent is not conformant: {failed}"),
        )
        .printed_as_json())
    }
}
