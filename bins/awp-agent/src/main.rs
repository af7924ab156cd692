//! `awp-agent`: the reference AWP agent CLI (awp-jsonl on stdout, one user message per stdin line).
//!
//! See [`HELP`] for the complete behaviour; the protocol is `protocols/awp.md` ("Reference agent").
//! Layout: [`args`] (command line), [`input`] (stdin lines), [`session`] (private history files),
//! [`provider`] + [`sse`] (OpenAI-compatible streaming or the built-in demo), this file (the turn loop).

mod args;
mod input;
mod output;
mod provider;
mod session;
mod sse;

use std::process::ExitCode;
use std::time::Instant;

use agentwire_jsonl::{Frame, JsonlDecoder, Limits};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::input::{Input, InputError, UserTurn};
use crate::output::{Event, TextBlock, TextDelta, TurnResult, UsageDto};
use crate::provider::{Provider, ProviderLimits, StreamItem};
use crate::session::{Message, Role, Session, SessionLimits, SessionStore};

/// `--help` text: everything the agent does, accepts and refuses.
const HELP: &str = "\
awp-agent — reference agent CLI for the AWP agent CLI protocol (awp-jsonl)

USAGE:
    awp-agent [--model <m>] [--resume <id> | --resume=<id>] [--mcp-config <path>]
              [--output-format stream-json --input-format stream-json --print --verbose]

ARGUMENTS:
    --model <m>           Provider model id (the built-in demo provider ignores it and reports builtin-demo).
                          Falls back to $OPENAI_MODEL with the OpenAI-compatible provider.
    --resume <id>         Continue native session <id> ([A-Za-z0-9._:-]{1,256}). An unknown id starts an
                          empty history under that id. Use --resume=<id> when the id starts with '-'.
    --mcp-config <path>   Consumed and ignored: this agent is not an MCP host.
    --output-format stream-json, --input-format stream-json, --print, --verbose
                          Compatibility flags, accepted as no-ops (the output is always awp-jsonl).
    -h, --help            This text.   -V, --version   The version.
    Any other argument is refused: stdout gets
    {\"type\":\"result\",\"subtype\":\"startup_error\",\"is_error\":true,\"result\":\"unsupported_argument\"}
    and the exit code is 1 (also: missing_argument_value, invalid_session_id, provider_url_invalid,
    provider_url_rejected, missing_model, provider_client_failed).

PROTOCOL:
    stdin:  one line per turn {\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[blocks]}}; blocks are
            text, and image with a base64 source (image/png, image/jpeg, image/gif, image/webp; sent to the
            OpenAI-compatible provider for that turn only, stored in history as a placeholder). Other blocks
            (document, tool_result, …) are refused: unsupported_content_block. {\"type\":\"shutdown\"} or stdin
            EOF ends the process with exit 0.
    stdout: nothing before the first valid input line; then {\"type\":\"system\",\"subtype\":\"init\",
            \"session_id\":…,\"model\":…} once; per turn the reply as content_block_start/delta/stop (text)
            and exactly one result: {\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,
            \"session_id\":…,\"result\":<text>,\"usage\":{\"input_tokens\":…,\"output_tokens\":…},
            \"duration_ms\":…,\"num_turns\":1} or {\"type\":\"result\",\"subtype\":\"error\",\"is_error\":true,
            \"result\":<code>}. Codes: invalid_input_line, input_line_too_long, unsupported_input_type,
            unsupported_content_block, empty_message, session_dir_unavailable, session_dir_insecure,
            session_store_failed, session_file_corrupt, session_id_unavailable, provider_unreachable,
            provider_timeout, provider_auth_failed, provider_rate_limited, provider_http_error,
            provider_bad_response, provider_reply_too_long. Upstream error text is never copied to stdout.
    stderr: diagnostics only.

SESSIONS:
    Stored in $AWP_AGENT_SESSION_DIR, else $XDG_STATE_HOME/awp-agent/sessions, else
    ~/.local/state/awp-agent/sessions: directory 0700 (refused if group/other accessible), one file
    <id>.json per session, 0600, replaced atomically (temp file in the same directory, fsync, rename).
    Bounded: the newest 100 messages and at most 4 MiB per file; the oldest messages are dropped first.
    Input lines: at most 32 MiB each (attachments are base64 inside the line); a longer line ends its
    turn with input_line_too_long.
    New ids are awp-<32 hex digits> (128 random bits). The whole stored history goes to the provider
    every turn, so a resumed session really continues.

PROVIDERS:
    OPENAI_BASE_URL set: OpenAI-compatible chat completions with SSE streaming at <base>/chat/completions,
        Authorization: Bearer $OPENAI_API_KEY when set. http:// only for loopback hosts; remote hosts need
        https:// (and the launcher's AWP_AGENT_REMOTE_API_OPT_IN=1). Usage comes from the provider
        (stream_options.include_usage); it is omitted when the provider sends none.
    otherwise: the built-in deterministic demo provider (model builtin-demo). It is not a model: it answers
        \"You said: <text> (turn <n> of this session; before that you said: <previous>)\" and counts usage
        in words.

NOT BUILT:
    Managed tasks (awp_run_managed_task, AWP_AGENT_MANAGED_TASKS_OPT_IN / AWP_CONTROL_PLANE_URL) are not
    implemented: this agent advertises no tools.
";

/// Input line limit in bytes: 32 MiB (33 554 432). The protocol bounds stdout lines at 4 MiB; stdin lines carry
/// base64 attachments (awp-host accepts files up to 10 MiB, about 13.4 MiB once encoded), so the input bound is
/// larger. A longer line ends its turn with `input_line_too_long` and the agent keeps reading.
const MAX_INPUT_LINE_BYTES: usize = 32 * 1024 * 1024;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("awp-agent: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(argv)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("awp-agent: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// stdout as a sink of protocol events: one compact JSON object + `\n` per call, flushed.
struct Events {
    stdout: tokio::io::Stdout,
}

impl Events {
    async fn send(&mut self, event: &Event<'_>) -> anyhow::Result<()> {
        let line = agentwire_jsonl::to_line(event)?;
        self.stdout.write_all(&line).await?;
        self.stdout.flush().await?;
        Ok(())
    }
}

async fn startup_error(events: &mut Events, code: &str) -> anyhow::Result<ExitCode> {
    events
        .send(&TurnResult::error("startup_error", None, code))
        .await?;
    Ok(ExitCode::FAILURE)
}

async fn run(argv: Vec<String>) -> anyhow::Result<ExitCode> {
    let mut events = Events {
        stdout: tokio::io::stdout(),
    };
    let args = match args::parse(&argv) {
        Ok(args) => args,
        Err(error) => return startup_error(&mut events, error.code()).await,
    };
    if args.help {
        events.stdout.write_all(HELP.as_bytes()).await?;
        events.stdout.flush().await?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.version {
        let line = format!("awp-agent {}\n", env!("CARGO_PKG_VERSION"));
        events.stdout.write_all(line.as_bytes()).await?;
        events.stdout.flush().await?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(id) = &args.resume
        && !session::is_valid_session_id(id)
    {
        return startup_error(&mut events, "invalid_session_id").await;
    }
    let lookup = |name: &str| std::env::var(name).ok();
    let provider =
        match Provider::from_vars(lookup, args.model.as_deref(), ProviderLimits::default()) {
            Ok(provider) => provider,
            Err(error) => return startup_error(&mut events, error.code()).await,
        };
    let mut agent = Agent {
        events,
        provider,
        store: SessionStore::from_vars(lookup, SessionLimits::default()),
        resume: args.resume,
        session: None,
    };
    agent.serve().await
}

/// The conversation: provider, store, and the session once the first valid line arrived.
struct Agent {
    events: Events,
    provider: Provider,
    store: Result<SessionStore, session::SessionError>,
    resume: Option<String>,
    session: Option<Session>,
}

impl Agent {
    /// Reads stdin lines until EOF or `shutdown`, answering each with one turn.
    async fn serve(&mut self) -> anyhow::Result<ExitCode> {
        let mut stdin = tokio::io::stdin();
        let mut decoder = JsonlDecoder::new(Limits {
            max_line_bytes: MAX_INPUT_LINE_BYTES,
            ..Limits::default()
        });
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut eof = false;
        loop {
            let frame = if eof {
                decoder.decode_eof(&mut buf)
            } else {
                decoder.decode(&mut buf)
            };
            let Some(frame) = frame else {
                if eof {
                    return Ok(ExitCode::SUCCESS);
                }
                if stdin.read_buf(&mut buf).await? == 0 {
                    eof = true;
                }
                continue;
            };
            let input = match frame {
                Frame::Json(line) => input::parse(&line),
                Frame::TooLong { .. } => Err(InputError::TooLong),
                _ => Err(InputError::InvalidLine),
            };
            match input {
                Ok(Input::Shutdown) => return Ok(ExitCode::SUCCESS),
                Ok(Input::User(turn)) => self.turn(turn).await?,
                Err(error) => self.fail_turn(error.code()).await?,
            }
        }
    }

    /// Ends a turn with `{"type":"result","subtype":"error","is_error":true,"result":code}`.
    async fn fail_turn(&mut self, code: &str) -> anyhow::Result<()> {
        let session_id = self.session.as_ref().map(|s| s.id.as_str());
        self.events
            .send(&TurnResult::error("error", session_id, code))
            .await
    }

    /// Opens the session (once) and emits `init`.
    async fn open_session(&mut self) -> Result<(), &'static str> {
        let store = self.store.as_ref().map_err(|e| e.code())?;
        let id = match &self.resume {
            Some(id) => id.clone(),
            None => session::new_session_id().map_err(|_| "session_id_unavailable")?,
        };
        let session = store.load(&id).map_err(|e| e.code())?;
        let cwd = std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let init = Event::System {
            subtype: "init",
            session_id: &session.id,
            model: self.provider.model(),
            cwd: &cwd,
            tools: [],
        };
        // A stdout failure ends the process; report it as the caller's error.
        let sent = self.events.send(&init).await.map_err(|_| "stdout_closed");
        self.session = Some(session);
        sent
    }

    async fn turn(&mut self, turn: UserTurn) -> anyhow::Result<()> {
        let started = Instant::now();
        if self.session.is_none() {
            match self.open_session().await {
                Ok(()) => {}
                Err("stdout_closed") => anyhow::bail!("stdout closed"),
                Err(code) => return self.fail_turn(code).await,
            }
        }
        let Ok(store) = self.store.as_ref() else {
            return self.fail_turn("session_dir_unavailable").await;
        };
        let Some(session) = self.session.as_mut() else {
            return self.fail_turn("session_store_failed").await;
        };
        let mut stored_text = turn.text.clone();
        for image in &turn.images {
            if !stored_text.is_empty() {
                stored_text.push('\n');
            }
            stored_text.push_str(&format!("[image: {}]", image.media_type));
        }
        // The user message is durable before the provider sees it.
        session.messages.push(Message {
            role: Role::User,
            content: stored_text,
        });
        if let Err(error) = store.save(session) {
            eprintln!("awp-agent: saving the session failed: {error}");
            session.messages.pop();
            return self.fail_turn(error.code()).await;
        }
        let history = session.messages.clone();
        let mut stream = match self.provider.start(&history, &turn).await {
            Ok(stream) => stream,
            Err(error) => return self.fail_turn(error.code()).await,
        };
        let mut reply = String::new();
        let mut usage = None;
        let mut block_open = false;
        let outcome = loop {
            match stream.next().await {
                Ok(Some(StreamItem::Text(text))) => {
                    if !block_open {
                        self.events
                            .send(&Event::ContentBlockStart {
                                index: 0,
                                content_block: TextBlock { text: "" },
                            })
                            .await?;
                        block_open = true;
                    }
                    self.events
                        .send(&Event::ContentBlockDelta {
                            index: 0,
                            delta: TextDelta { text: &text },
                        })
                        .await?;
                    reply.push_str(&text);
                }
                Ok(Some(StreamItem::Usage(u))) => usage = Some(u),
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        if block_open {
            self.events
                .send(&Event::ContentBlockStop { index: 0 })
                .await?;
        }
        if let Err(error) = outcome {
            return self.fail_turn(error.code()).await;
        }
        let Some(session) = self.session.as_mut() else {
            return self.fail_turn("session_store_failed").await;
        };
        session.messages.push(Message {
            role: Role::Assistant,
            content: reply.clone(),
        });
        if let Err(error) = store.save(session) {
            eprintln!("awp-agent: saving the session failed: {error}");
            return self.fail_turn(error.code()).await;
        }
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let result = Event::Result(TurnResult {
            subtype: "success",
            is_error: false,
            session_id: Some(&session.id),
            result: &reply,
            usage: usage.map(|u| UsageDto {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
            }),
            duration_ms: Some(duration_ms),
            num_turns: Some(1),
        });
        self.events.send(&result).await
    }
}
