//! `awp-agent`: the reference AWP agent CLI (awp-jsonl on stdout, one user message per stdin line).
//!
//! See [`HELP`] for the complete behaviour; the protocol is `protocols/awp.md` ("Reference agent").
//! Layout: [`args`] (command line), [`input`] (stdin lines), [`session`] (private history files),
//! [`provider`] (history → `agentwire-provider` chat requests; OpenAI-compatible streaming or the built-in
//! demo), this file (the turn loop).

mod args;
mod input;
mod output;
mod provider;
mod session;
mod tasks;

use std::process::ExitCode;
use std::time::Instant;

use agentwire_jsonl::{Frame, JsonlDecoder, Limits};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::input::{Input, InputError, UserTurn};
use crate::output::{Event, TextBlock, TextDelta, TurnResult, UsageDto};
use crate::provider::{Provider, ToolRound};
use crate::session::{Message, Role, Session, SessionLimits, SessionStore};
use crate::tasks::{ManagedTasks, TOOL_NAME, TaskToolLimits};
use agentwire_provider::StreamItem;

/// Most provider rounds with tool calls in one turn; one more is `managed_tool_round_limit`.
const MAX_TOOL_ROUNDS: usize = 4;
/// Most tool calls in one turn; one more is `managed_tool_call_limit`.
const MAX_TOOL_CALLS_PER_TURN: usize = 4;

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
    provider_url_rejected, missing_model, provider_client_failed, control_plane_url_invalid,
    control_plane_url_rejected, control_plane_remote_not_allowed, control_plane_key_invalid,
    control_plane_client_failed).

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
            \"result\":<code>} (+ \"errors\":[<reason>] for message_too_large). Codes: invalid_input_line,
            input_line_too_long, message_too_large, unsupported_input_type,
            unsupported_content_block, empty_message, session_dir_unavailable, session_dir_insecure,
            session_store_failed, session_file_corrupt, session_id_unavailable, provider_unreachable,
            provider_timeout, provider_auth_failed, provider_rate_limited, provider_http_error,
            provider_bad_response, provider_reply_too_long, provider_response_too_large (one SSE event over
            1 MiB), provider_requested_unavailable_tool,
            managed_tool_call_limit, managed_tool_round_limit. Upstream error text is never copied to stdout.
    stderr: diagnostics only.

SESSIONS:
    Stored in $AWP_AGENT_SESSION_DIR, else $XDG_STATE_HOME/awp-agent/sessions, else
    ~/.local/state/awp-agent/sessions: directory 0700 (refused if group/other accessible), one file
    <id>.json per session, 0600, replaced atomically (temp file in the same directory, fsync, rename).
    Bounded: the newest 100 messages and at most 4 MiB (4194304 bytes) of JSON per file; the oldest
    messages are dropped first. A new message must fit in a session file on its own (its JSON-escaped text
    plus about 90 bytes of envelope): a larger one fails its turn with message_too_large before the
    provider sees it and is not stored (the result's \"errors\" says the bytes needed and the limit).
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

MANAGED TASKS:
    Off (chat-only, no tools) unless all three are set: AWP_AGENT_MANAGED_TASKS_OPT_IN=1,
    AWP_CONTROL_PLANE_URL (the task API's origin, e.g. http://127.0.0.1:8100 from awp-host serve
    --tasks-listen) and AWP_CONTROL_PLANE_API_KEY (16 to 4096 bytes, no whitespace). Then the agent offers
    exactly one tool, awp_run_managed_task {\"argv\":[...], \"timeout_seconds\":1..300 (default 60)}: init lists
    it in tools, the OpenAI-compatible provider gets it in the tools format. A call is validated (at most 32
    argv items of at most 8192 bytes, 64 KiB in all; never a shell), POSTed to <url>/v1/tasks with
    Authorization: Bearer <key> and an Idempotency-Key derived from the session id, turn number, tool call id
    and arguments (a repeated call is the same task), then polled with GET /v1/tasks/<id> for up to
    timeout_seconds + 10 s. The result goes back to the provider as JSON: task_id, status, exit_code,
    signal, stdout and stderr (at most 16 KiB each, *_truncated flags) and error; status wait_timed_out means
    the agent stopped waiting and the task may still be running (it was not cancelled); outcome_unknown
    means contact was lost after submission; not_submitted carries the reason in error. The control
    plane's executable allow-list decides what runs. Per turn: at most 4 tool calls and 4 tool rounds
    (managed_tool_call_limit, managed_tool_round_limit). Tool use and results appear on stdout as
    {\"type\":\"assistant\",…tool_use…} and {\"type\":\"user\",…tool_result…} lines.
    URL rules: plain http only to loopback hosts (control_plane_url_rejected); https to a remote host also
    needs AWP_AGENT_REMOTE_API_OPT_IN=1 (control_plane_remote_not_allowed); no path, query or credentials
    (control_plane_url_invalid); a bad key is control_plane_key_invalid. These are startup errors.
    Built-in provider: with the tool offered, a prompt \"run-task: <json>\" (an argv array such as
    run-task: [\"echo\",\"hi\"], or {\"argv\":[...],\"timeout_seconds\":n}) makes it call the tool, and its
    answer reports the result (\"Managed task <id> succeeded, exit code 0.\" then stdout/stderr), so the whole
    path runs without a model.
    Under awp-host the agent's environment is an allowlist: put the three variables in the agent's
    agents.toml env (or AWP_AGENT_CLI_ENV_JSON for the env agent), not in the shell.
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
    /// Sends a line built as a JSON value (the tool use and tool result messages).
    async fn send_value(&mut self, value: &serde_json::Value) -> anyhow::Result<()> {
        let line = agentwire_jsonl::to_line(value)?;
        self.stdout.write_all(&line).await?;
        self.stdout.flush().await?;
        Ok(())
    }

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
    let provider = match Provider::from_vars(
        lookup,
        args.model.as_deref(),
        agentwire_provider::Limits::default(),
    ) {
        Ok(provider) => provider,
        Err(error) => return startup_error(&mut events, error.code()).await,
    };
    let managed = match ManagedTasks::from_vars(lookup, TaskToolLimits::default()) {
        Ok(managed) => managed,
        Err(error) => return startup_error(&mut events, error.code()).await,
    };
    let mut agent = Agent {
        events,
        provider,
        managed,
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
    /// The managed-task tool, when its three variables are set.
    managed: Option<ManagedTasks>,
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
        let tools: &[&str] = if self.managed.is_some() {
            &[TOOL_NAME]
        } else {
            &[]
        };
        let init = Event::System {
            subtype: "init",
            session_id: &session.id,
            model: self.provider.model(),
            cwd: &cwd,
            tools,
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
        let message = Message {
            role: Role::User,
            content: stored_text,
        };
        // A message that cannot be stored even alone fails the turn: never sent, never stored, never dropped
        // silently (older messages are trimmed on save; the current one never is).
        if let Err(error) = store.check_fits(session, &message) {
            eprintln!("awp-agent: {error}");
            let errors = [error.to_string()];
            let session_id = session.id.clone();
            return self
                .events
                .send(&TurnResult::error_with(
                    "error",
                    Some(&session_id),
                    error.code(),
                    &errors,
                ))
                .await;
        }
        // The user message is durable before the provider sees it.
        session.messages.push(message);
        session.turns += 1;
        if let Err(error) = store.save(session) {
            eprintln!("awp-agent: saving the session failed: {error}");
            session.messages.pop();
            session.turns -= 1;
            return self.fail_turn(error.code()).await;
        }
        let history = session.messages.clone();
        let session_id = session.id.clone();
        let turn_number = session.turns;
        let tools: Vec<serde_json::Value> = self
            .managed
            .iter()
            .map(ManagedTasks::tool_definition)
            .collect();
        let mut rounds: Vec<ToolRound> = Vec::new();
        let mut reply = String::new();
        let mut usage: Option<agentwire_provider::Usage> = None;
        let mut block_index = 0u32;
        let mut calls_made = 0usize;
        loop {
            let mut stream = match self.provider.start(&history, &turn, &tools, &rounds).await {
                Ok(stream) => stream,
                Err(error) => return self.fail_turn(error.code()).await,
            };
            let mut round_text = String::new();
            let mut calls = Vec::new();
            let mut block_open = false;
            let outcome = loop {
                match stream.next().await {
                    Ok(Some(StreamItem::Text(text))) => {
                        if !block_open {
                            self.events
                                .send(&Event::ContentBlockStart {
                                    index: block_index,
                                    content_block: TextBlock { text: "" },
                                })
                                .await?;
                            block_open = true;
                        }
                        self.events
                            .send(&Event::ContentBlockDelta {
                                index: block_index,
                                delta: TextDelta { text: &text },
                            })
                            .await?;
                        round_text.push_str(&text);
                    }
                    Ok(Some(StreamItem::Usage(u))) => {
                        usage = Some(match usage {
                            Some(total) => agentwire_provider::Usage {
                                input_tokens: total.input_tokens + u.input_tokens,
                                output_tokens: total.output_tokens + u.output_tokens,
                            },
                            None => u,
                        });
                    }
                    Ok(Some(StreamItem::ToolCall(call))) => calls.push(call),
                    // Reasoning is not part of the AWP reply; the finish reason is implied by the result.
                    Ok(Some(StreamItem::Reasoning(_) | StreamItem::Finish(_))) => {}
                    Ok(None) => break Ok(()),
                    Err(error) => break Err(error),
                }
            };
            if block_open {
                self.events
                    .send(&Event::ContentBlockStop { index: block_index })
                    .await?;
                block_index += 1;
            }
            if let Err(error) = outcome {
                return self.fail_turn(error.code()).await;
            }
            reply.push_str(&round_text);
            if calls.is_empty() {
                break;
            }
            let Some(managed) = self.managed.as_ref() else {
                return self.fail_turn("provider_requested_unavailable_tool").await;
            };
            calls_made += calls.len();
            if calls_made > MAX_TOOL_CALLS_PER_TURN {
                return self.fail_turn("managed_tool_call_limit").await;
            }
            if rounds.len() >= MAX_TOOL_ROUNDS {
                return self.fail_turn("managed_tool_round_limit").await;
            }
            let uses: Vec<serde_json::Value> = calls
                .iter()
                .map(|call| {
                    let input = serde_json::from_str::<serde_json::Value>(&call.arguments)
                        .unwrap_or_else(|_| serde_json::json!({}));
                    serde_json::json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
                })
                .collect();
            self.events
                .send_value(&serde_json::json!({
                    "type": "assistant",
                    "message": {"role": "assistant", "content": uses},
                    "session_id": session_id,
                }))
                .await?;
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                let result = if call.name == TOOL_NAME {
                    managed
                        .run(&call.arguments, &session_id, turn_number, &call.id)
                        .await
                } else {
                    serde_json::json!({"status": "not_submitted", "error": "unknown_tool"})
                };
                let is_error =
                    result.get("status").and_then(serde_json::Value::as_str) != Some("succeeded");
                let text = result.to_string();
                self.events
                    .send_value(&serde_json::json!({
                        "type": "user",
                        "message": {"role": "user", "content": [{
                            "type": "tool_result", "tool_use_id": call.id,
                            "content": text, "is_error": is_error,
                        }]},
                        "session_id": session_id,
                    }))
                    .await?;
                results.push((call, text));
            }
            rounds.push(ToolRound {
                text: round_text,
                calls: results,
            });
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
            num_turns: Some(u32::try_from(rounds.len() + 1).unwrap_or(u32::MAX)),
            errors: &[],
        });
        self.events.send(&result).await
    }
}
