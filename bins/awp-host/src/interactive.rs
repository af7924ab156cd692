//! `awp-host chat` without a prompt on a terminal: an interactive session.
//!
//! Line editing and history come from rustyline (history in `<data dir>/history`, at most [`HISTORY_ENTRIES`]
//! lines). One agent process serves the whole conversation ([`LiveAgent`]): every line is one more turn on its
//! stdin, recorded in the store exactly like a `chat` turn. Ctrl-C while a turn runs cancels it (Claude Code with
//! the control protocol gets an `interrupt` and keeps its process; otherwise the stop ladder ends the process and
//! the next turn starts a new one that resumes the session, and the user is told); a second
//! Ctrl-C kills the agent's process group at once. Ctrl-C at a permission question denies (rejects) it at once and
//! cancels the turn (`crate::acp`). Ctrl-C at the prompt clears the line; Ctrl-D (or `/exit`)
//! ends the session and stops the agent. `/thread` prints the thread, session and last run ids; `/new` starts a
//! new thread (and a new agent process).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentwire_host::store::escape_controls;
use agentwire_host::{
    AgentSpec, Attachment, LiveAgent, RunId, Store, ThreadId, TurnOptions, TurnRequest,
    run_turn_live,
};
use rustyline::error::ReadlineError;

use crate::Failure;
use crate::exit::Exit;
use crate::render::{Format, Renderer, failure_message, status_line};

/// History lines kept in `<data dir>/history`.
pub const HISTORY_ENTRIES: usize = 1000;

/// File name of the line history inside the data directory.
pub const HISTORY_FILE: &str = "history";

/// The prompt shown before each line.
const PROMPT: &str = "› ";

/// What a line typed at the prompt asks for.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    /// Nothing (blank line).
    Empty,
    /// A prompt for the agent.
    Prompt(&'a str),
    /// `/thread`: print the ids.
    Thread,
    /// `/new`: start a new thread.
    New,
    /// `/exit` (or `/quit`): end the session.
    Exit,
    /// `/help` or an unknown `/command`.
    Help(Option<&'a str>),
}

fn parse_line(line: &str) -> Line<'_> {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return Line::Empty;
    }
    match trimmed {
        "/thread" => Line::Thread,
        "/new" => Line::New,
        "/exit" | "/quit" => Line::Exit,
        "/help" => Line::Help(None),
        // `//text` sends `/text` to the agent.
        _ if trimmed.starts_with("//") => Line::Prompt(&trimmed[1..]),
        _ if trimmed.starts_with('/') => Line::Help(Some(trimmed)),
        _ => Line::Prompt(trimmed),
    }
}

const HELP: &str = "commands: /thread (print ids), /new (new thread), /exit (or Ctrl-D); \
//text sends /text; Ctrl-C cancels a running turn";

/// Ctrl-C routing: the first SIGINT of a turn cancels it, a second one aborts it (SIGKILL to the agent's group).
#[derive(Debug)]
struct TurnSignals {
    cancel: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    abort: tokio::sync::watch::Sender<bool>,
}

impl TurnSignals {
    /// Arms the signals for one turn: returns its cancel future.
    fn arm(&self) -> impl std::future::Future<Output = ()> + use<> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut slot) = self.cancel.lock() {
            *slot = Some(tx);
        }
        self.abort.send_replace(false);
        async move {
            if rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn disarm(&self) {
        if let Ok(mut slot) = self.cancel.lock() {
            *slot = None;
        }
    }

    fn on_signal(&self) {
        let first = self.cancel.lock().ok().and_then(|mut slot| slot.take());
        match first {
            Some(tx) => {
                eprintln!(
                    "\nawp-host: cancelling the turn (press Ctrl-C again to kill the agent now)"
                );
                if tx.send(()).is_err() {
                    // The turn ended meanwhile.
                }
            }
            None => {
                self.abort.send_replace(true);
            }
        }
    }
}

/// Everything a session needs besides the store.
pub struct Session<'a> {
    /// The agent serving the conversation.
    pub agent: &'a AgentSpec,
    /// Options of every turn (without `abort`, set here).
    pub options: TurnOptions,
    /// The thread to continue (`--thread`), else a new one on the first line.
    pub thread: Option<ThreadId>,
    /// `--model`.
    pub model: Option<String>,
    /// `--attach` files, sent with the first turn.
    pub attachments: Vec<Attachment>,
    /// The data directory (for the history file).
    pub data_dir: PathBuf,
}

/// Runs the session until Ctrl-D or `/exit`. Exit 0; a turn's failure is printed and the session goes on.
///
/// # Errors
/// [`Failure`] when the line editor or the signal handler cannot be set up.
pub async fn run(store: &mut Store, session: Session<'_>) -> Result<Exit, Failure> {
    let Session {
        agent,
        options,
        mut thread,
        model,
        mut attachments,
        data_dir,
    } = session;
    let config = rustyline::Config::builder()
        .max_history_size(HISTORY_ENTRIES)
        .map_err(|e| Failure::from_error(Exit::Protocol, "line_editor", &e))?
        .auto_add_history(false)
        .build();
    let mut editor = rustyline::DefaultEditor::with_config(config)
        .map_err(|e| Failure::from_error(Exit::Protocol, "line_editor", &e))?;
    let history = data_dir.join(HISTORY_FILE);
    if let Err(e) = editor.load_history(&history)
        && !matches!(&e, ReadlineError::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
    {
        eprintln!(
            "awp-host: the history {} could not be read: {e}",
            history.display()
        );
    }

    let (abort_tx, abort_rx) = tokio::sync::watch::channel(false);
    let signals = Arc::new(TurnSignals {
        cancel: Mutex::new(None),
        abort: abort_tx,
    });
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut sigint = signal(SignalKind::interrupt())
            .map_err(|e| Failure::from_error(Exit::Protocol, "signal_handler", &e))?;
        let signals = Arc::clone(&signals);
        tokio::spawn(async move {
            while sigint.recv().await.is_some() {
                signals.on_signal();
            }
        });
    }
    let options = TurnOptions {
        abort: Some(abort_rx.clone()),
        ..options
    };

    let where_ = match &thread {
        Some(id) => format!("thread {id}"),
        None => "a new thread".to_owned(),
    };
    eprintln!(
        "awp-host: interactive session with agent `{}` on {where_}; {HELP}",
        escape_controls(&agent.name, true)
    );
    let mut live = LiveAgent::new();
    let mut last_run: Option<RunId> = None;
    let mut session_id: Option<String> = None;
    loop {
        let (back, read) = match tokio::task::spawn_blocking(move || {
            let read = editor.readline(PROMPT);
            (editor, read)
        })
        .await
        {
            Ok(pair) => pair,
            Err(e) => {
                live.stop().await;
                return Err(Failure::from_error(Exit::Protocol, "line_editor", &e));
            }
        };
        editor = back;
        let line = match read {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                live.stop().await;
                save_history(&mut editor, &history);
                return Err(Failure::from_error(Exit::Protocol, "line_editor", &e));
            }
        };
        let parsed = parse_line(&line);
        if parsed != Line::Empty
            && let Err(e) = editor.add_history_entry(line.trim())
        {
            tracing::debug!(error = %e, "history entry not added");
        }
        let prompt = match parsed {
            Line::Empty => continue,
            Line::Exit => break,
            Line::Help(unknown) => {
                if let Some(command) = unknown {
                    eprintln!(
                        "awp-host: unknown command {}",
                        escape_controls(command, true)
                    );
                }
                eprintln!("{HELP}");
                continue;
            }
            Line::Thread => {
                let show = |v: Option<&str>| v.unwrap_or("(none yet)").to_owned();
                println!(
                    "thread {} · session {} · last run {} · agent pid {}",
                    show(thread.as_ref().map(ThreadId::as_str)),
                    escape_controls(&show(session_id.as_deref()), true),
                    show(last_run.as_ref().map(RunId::as_str)),
                    live.pid()
                        .map_or_else(|| "(not running)".to_owned(), |p| p.to_string())
                );
                continue;
            }
            Line::New => {
                live.new_thread().await;
                thread = None;
                last_run = None;
                session_id = None;
                eprintln!("awp-host: the next line starts a new thread");
                continue;
            }
            Line::Prompt(text) => text.to_owned(),
        };
        let request = TurnRequest {
            thread: thread.clone(),
            model: model.clone(),
            prompt,
            attachments: std::mem::take(&mut attachments),
            title: None,
        };
        let cancel = signals.arm();
        let restarts = live.restarts();
        let result = {
            let stdout = std::io::stdout();
            let mut renderer = Renderer::new(Format::Human, stdout.lock());
            let result = run_turn_live(
                store,
                agent,
                request,
                &options,
                &mut |event| renderer.event(event),
                cancel,
                &mut live,
            )
            .await;
            if let Some(e) = renderer.take_error() {
                eprintln!("awp-host: writing the output failed: {e}");
            }
            result
        };
        signals.disarm();
        if live.restarts() > restarts {
            eprintln!("{}", restart_notice(&agent.protocol));
        }
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                eprintln!("awp-host: error: {e} ({})", e.code());
                continue;
            }
        };
        eprintln!("{}", status_line(&report));
        if let Some(code) = &report.error_code {
            let mut message = failure_message(code, report.error_detail.as_deref(), agent);
            if let Some(reason) = &report.error_reason {
                message.push_str(&format!(" — the agent said: {reason}"));
            }
            eprintln!("awp-host: error: {message} ({code})");
            if !live.is_alive() {
                eprintln!(
                    "awp-host: the agent process was stopped; the next line starts a new one that resumes the session"
                );
            }
        }
        thread = Some(report.thread_id.clone());
        last_run = Some(report.run_id.clone());
        session_id = report.session_id.clone();
    }
    live.stop().await;
    save_history(&mut editor, &history);
    Ok(Exit::Ok)
}

fn save_history(editor: &mut rustyline::DefaultEditor, path: &std::path::Path) {
    if let Err(e) = editor.save_history(path) {
        eprintln!(
            "awp-host: the history {} could not be saved: {e}",
            path.display()
        );
    }
}

/// What the session says when a turn ran on a new agent process that resumed the thread's session: for ACP
/// agents that is how every turn runs (one process per turn, the session reopened with `session/resume`, else
/// `session/load`), so it is worded as normal; for the others the previous process had stopped.
pub fn restart_notice(protocol: &agentwire_host::AgentProtocol) -> &'static str {
    match protocol {
        agentwire_host::AgentProtocol::Acp => {
            "awp-host: a new agent process resumed the thread's session (as usual for ACP agents: one process per turn)"
        }
        _ => "awp-host: the agent had stopped; a new agent process resumed the thread's session",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acp_agent_resuming_each_turn_is_worded_as_normal() {
        let acp = restart_notice(&agentwire_host::AgentProtocol::Acp);
        assert!(acp.contains("as usual for ACP agents"), "{acp}");
        assert!(!acp.contains("stopped"), "{acp}");
        assert!(
            restart_notice(&agentwire_host::AgentProtocol::AwpJsonl)
                .contains("the agent had stopped")
        );
    }

    #[test]
    fn slash_commands_and_prompts_are_told_apart() {
        assert_eq!(parse_line("  "), Line::Empty);
        assert_eq!(parse_line(" hi there "), Line::Prompt("hi there"));
        assert_eq!(parse_line("/thread"), Line::Thread);
        assert_eq!(parse_line("/new "), Line::New);
        assert_eq!(parse_line("/exit"), Line::Exit);
        assert_eq!(parse_line("/quit"), Line::Exit);
        assert_eq!(parse_line("/help"), Line::Help(None));
        assert_eq!(parse_line("/nope"), Line::Help(Some("/nope")));
        assert_eq!(parse_line("//etc/passwd?"), Line::Prompt("/etc/passwd?"));
    }
}
