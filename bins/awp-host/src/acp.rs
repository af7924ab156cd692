//! ACP specifics of `awp-host`: how `chat` answers permission requests, and `check --protocol acp`.

use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use agentwire_acp::conformance::{CheckPlan, Outcome, run_check};
use agentwire_acp::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SelectedPermissionOutcome,
};
use agentwire_awp::control::PermissionAnswer;
use agentwire_host::acp_turn::{AcpPermissions, reject_outcome};
use agentwire_host::store::escape_controls;
use agentwire_host::tool_permissions::{ToolPermissionRequest, ToolPermissions};

use crate::Failure;
use crate::exit::Exit;

/// Most bytes of a typed permission answer that are read (64); a longer line is not a valid number and rejects.
pub const MAX_ANSWER_BYTES: u64 = 64;

/// The permission policy of a `chat` turn: `--yes` allows once ([`AcpPermissions::allow_once`]); otherwise a TTY
/// stdin is asked on the terminal; otherwise every request is rejected (fail closed).
pub fn permissions(yes: bool) -> AcpPermissions {
    if yes {
        return AcpPermissions::allow_once();
    }
    if !std::io::stdin().is_terminal() {
        return AcpPermissions::reject();
    }
    // One question at a time on the terminal, even when the agent asks several at once.
    let terminal = Arc::new(tokio::sync::Mutex::new(()));
    AcpPermissions::new(move |request| {
        let terminal = terminal.clone();
        Box::pin(async move {
            let _turn = terminal.lock().await;
            let fallback = reject_outcome(&request.options);
            // Ctrl-C ends the question at once; the same signal cancels the turn, and the client answers the
            // request `cancelled` right after queueing `session/cancel` (ACP v1 "Cancellation": a client that
            // sends session/cancel answers every pending permission request `cancelled`). Should no cancel
            // follow, the answer is `cancelled` all the same after CANCELLED_ANSWER_FALLBACK. A turn cancelled
            // otherwise drops this future, which ends the read as well.
            match ask_terminal(question(&request)).await {
                Answered::Line(line) => choice(&request.options, &line).unwrap_or(fallback),
                Answered::Interrupted => {
                    tokio::time::sleep(CANCELLED_ANSWER_FALLBACK).await;
                    RequestPermissionOutcome::Cancelled
                }
                Answered::Closed => fallback,
            }
        })
    })
}

/// The policy for Claude Code's `can_use_tool` control requests (stream-json agents with `control_protocol` on),
/// the same as [`permissions`] for ACP: `--yes` allows ([`ToolPermissions::allow`]); otherwise a TTY stdin is
/// asked on the terminal, showing the tool and its input (escaped, bounded); otherwise denied (fail closed).
pub fn tool_permissions(yes: bool) -> ToolPermissions {
    if yes {
        return ToolPermissions::allow();
    }
    if !std::io::stdin().is_terminal() {
        return ToolPermissions::deny();
    }
    let terminal = Arc::new(tokio::sync::Mutex::new(()));
    ToolPermissions::new(move |request| {
        let terminal = terminal.clone();
        Box::pin(async move {
            let _turn = terminal.lock().await;
            // Ctrl-C denies at once; the same signal cancels the turn, which sends Claude Code `interrupt`.
            match ask_terminal(tool_question(&request)).await {
                Answered::Line(line) => tool_choice(&line),
                Answered::Interrupted => PermissionAnswer::Deny(INTERRUPTED_BY_USER.to_owned()),
                Answered::Closed => PermissionAnswer::Deny(DENIED_BY_USER.to_owned()),
            }
        })
    })
}

/// How long a permission question ended with Ctrl-C waits for the turn's cancel to answer it `cancelled` (after
/// `session/cancel`) before answering `cancelled` itself (1 s).
pub const CANCELLED_ANSWER_FALLBACK: std::time::Duration = std::time::Duration::from_secs(1);

/// Message of a `can_use_tool` request the user did not allow.
pub const DENIED_BY_USER: &str = "denied by the user in awp-host";

/// Message of a `can_use_tool` request whose question the user answered with Ctrl-C.
pub const INTERRUPTED_BY_USER: &str = "interrupted by the user (Ctrl-C) in awp-host";

/// How a question on the terminal was answered.
#[derive(Debug, PartialEq, Eq)]
enum Answered {
    /// A line (without its newline; at most [`MAX_ANSWER_BYTES`] + 1 bytes of it kept, so that a longer one is
    /// no valid answer).
    Line(String),
    /// Ctrl-C (SIGINT) while the question waited.
    Interrupted,
    /// stdin ended or failed, or stderr could not be written.
    Closed,
}

/// Prints `question` on stderr and reads one answer line from stdin on a blocking thread, which waits in `poll`
/// on stdin and on a wake-up pipe. Ctrl-C (SIGINT) ends the wait at once ([`Answered::Interrupted`]); so does
/// dropping the future (the pipe's write end closes): no reader is left behind to take a line typed later (at
/// the interactive session's prompt).
async fn ask_terminal(question: String) -> Answered {
    let Ok((wake_read, wake_write)) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
    else {
        return Answered::Closed;
    };
    // Listening before the question is shown: a Ctrl-C right after it is seen.
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let mut reader = tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr().lock();
        if err
            .write_all(question.as_bytes())
            .and_then(|()| err.flush())
            .is_err()
        {
            return Answered::Closed;
        }
        drop(err);
        read_answer(&wake_read)
    });
    let interrupted = async {
        match sigint.as_mut() {
            Some(sigint) => {
                sigint.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        read = &mut reader => read.unwrap_or(Answered::Closed),
        () = interrupted => {
            drop(wake_write);
            // The reader sees the pipe close and returns at once.
            let _ = reader.await;
            eprintln!();
            Answered::Interrupted
        }
    }
}

/// Reads one line from stdin (the terminal, in canonical mode: a read returns at most one line), returning
/// [`Answered::Interrupted`] as soon as `wake` becomes readable or closed. Keeps at most [`MAX_ANSWER_BYTES`] + 1
/// bytes; the rest of a longer line is read and dropped.
fn read_answer(wake: &OwnedFd) -> Answered {
    use rustix::event::{PollFd, PollFlags, poll};
    let stdin = std::io::stdin();
    let stdin = stdin.as_fd();
    let keep = usize::try_from(MAX_ANSWER_BYTES)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let mut fds = [
            PollFd::new(&stdin, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Answered::Closed,
        }
        if !fds[1].revents().is_empty() {
            return Answered::Interrupted;
        }
        if fds[0].revents().is_empty() {
            continue;
        }
        let n = match rustix::io::read(stdin, &mut buf) {
            Ok(0) if line.is_empty() => return Answered::Closed,
            Ok(0) => break,
            Ok(n) => n,
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
            Err(_) => return Answered::Closed,
        };
        let chunk = buf.get(..n).unwrap_or_default();
        let end = chunk.iter().position(|b| *b == b'\n');
        let text = chunk.get(..end.unwrap_or(n)).unwrap_or_default();
        let room = keep.saturating_sub(line.len());
        line.extend_from_slice(text.get(..text.len().min(room)).unwrap_or_default());
        if end.is_some() {
            break;
        }
    }
    Answered::Line(String::from_utf8_lossy(&line).into_owned())
}

/// The question for a `can_use_tool` request: tool name and input JSON, each cut to [`MAX_SHOWN_CHARS`] and
/// escaped for the terminal like [`question`].
pub fn tool_question(request: &ToolPermissionRequest) -> String {
    format!(
        "\nawp-host: the agent asks to use tool {} with input {}\nallow? [y/N] ",
        shown(&request.tool_name),
        shown(&request.input.to_string())
    )
}

/// `y` / `yes` (any case, surrounding blanks ignored) allows; anything else denies.
pub fn tool_choice(answer: &str) -> PermissionAnswer {
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => PermissionAnswer::Allow,
        _ => PermissionAnswer::Deny(DENIED_BY_USER.to_owned()),
    }
}

/// Most characters of one agent-supplied text (tool-call id, title, option name) shown in a permission question;
/// longer text is cut and ends with `…`.
pub const MAX_SHOWN_CHARS: usize = 200;

/// The question shown on stderr: the tool call (kind, title and, when known, its raw input on an `input:` line; the
/// host fills what the request omits from the call the agent announced with the same id), and the numbered options, each option's kind from the protocol's
/// `kind` field first (`[allow_always]`), then its agent-chosen label. Everything the agent wrote is cut to
/// [`MAX_SHOWN_CHARS`] and escaped for the terminal ([`escape_controls`], single line): escape sequences (cursor
/// movement, line erasure, window titles, hidden text), newlines and bidirectional controls are shown as `\u{…}`,
/// never interpreted, so the label cannot disguise the kind or redraw the question.
pub fn question(request: &RequestPermissionRequest) -> String {
    let fields = &request.tool_call.fields;
    let title = shown(fields.title.as_deref().unwrap_or("(untitled tool call)"));
    let kind = fields
        .kind
        .as_ref()
        .and_then(|k| serde_json::to_value(k).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    let mut text = format!(
        "\nawp-host: the agent asks permission for tool call {} ({}): {title}\n",
        shown(&request.tool_call.tool_call_id.to_string()),
        shown(&kind)
    );
    if let Some(input) = &fields.raw_input {
        text.push_str(&format!("  input: {}\n", shown(&input.to_string())));
    }
    for (n, option) in request.options.iter().enumerate() {
        text.push_str(&format!(
            "  {}) [{}] {}\n",
            n + 1,
            option_kind(option.kind),
            shown(&option.name)
        ));
    }
    text.push_str("choose a number (anything else rejects): ");
    text
}

/// The protocol name of an option's kind (schema `$defs/PermissionOptionKind`).
fn option_kind(kind: PermissionOptionKind) -> &'static str {
    match kind {
        PermissionOptionKind::AllowOnce => "allow_once",
        PermissionOptionKind::AllowAlways => "allow_always",
        PermissionOptionKind::RejectOnce => "reject_once",
        PermissionOptionKind::RejectAlways => "reject_always",
        _ => "unknown_kind",
    }
}

/// Agent text as shown on the terminal: cut to [`MAX_SHOWN_CHARS`], then escaped.
fn shown(text: &str) -> String {
    let cut: String = if text.chars().count() > MAX_SHOWN_CHARS {
        text.chars()
            .take(MAX_SHOWN_CHARS - 1)
            .chain(std::iter::once('…'))
            .collect()
    } else {
        text.to_owned()
    };
    escape_controls(&cut, true).into_owned()
}

/// The option a typed answer selects: its 1-based number; `None` for anything else (the caller rejects).
pub fn choice(options: &[PermissionOption], answer: &str) -> Option<RequestPermissionOutcome> {
    let n: usize = answer.trim().parse().ok()?;
    let option = options.get(n.checked_sub(1)?)?;
    Some(RequestPermissionOutcome::Selected(
        SelectedPermissionOutcome::new(option.option_id.clone()),
    ))
}

/// `awp-host check --protocol acp -- CMD ARGS…` (or `--agent NAME` of an ACP agent): the ACP conformance report of
/// `launch`'s executable, arguments and env, exit 0 / 3 / 8 as the AWP check. `timeout` bounds each answer
/// (default [`agentwire_acp::conformance::CheckLimits::step_timeout`]); `max_line_bytes` is the agent's configured
/// line limit.
///
/// # Errors
/// A [`Failure`] with exit 3 when the agent cannot be spawned, 8 when a must rule fails.
pub async fn check(
    launch: &agentwire_awp::LaunchConfig,
    timeout: Option<std::time::Duration>,
    max_line_bytes: Option<usize>,
    json: bool,
) -> Result<Exit, Failure> {
    let mut plan = CheckPlan::new(&launch.executable, launch.prefix_args.iter().cloned());
    plan.env = launch
        .env
        .iter()
        .map(|(key, value)| (key.into(), value.into()))
        .collect();
    if let Some(timeout) = timeout {
        plan.limits.step_timeout = timeout;
    }
    if let Some(max_line_bytes) = max_line_bytes {
        plan.limits.max_line_bytes = max_line_bytes;
    }
    let report = run_check(plan).await;
    let text = if json {
        let value = serde_json::to_value(&report)
            .map_err(|e| Failure::from_error(Exit::Protocol, "internal", &e))?;
        format!("{value}\n")
    } else {
        report.render_text()
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::from_error(Exit::Protocol, "output_write_failed", &e))?;
    if report.passed() {
        return Ok(Exit::Ok);
    }
    if report
        .get("spawns")
        .is_some_and(|r| matches!(r.outcome, Outcome::Fail { .. }))
    {
        // The report (printed above) is the one JSON object of `--json`.
        return Err(Failure::new(
            Exit::AgentUnavailable,
            "agent_unavailable",
            "the agent could not be launched",
        )
        .printed_as_json());
    }
    Err(Failure::new(
        Exit::Protocol,
        "check_failed",
        format!(
            "the agent is not conformant: {}",
            report.failed_ids().join(", ")
        ),
    )
    .printed_as_json())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_acp::schema::{ToolCallUpdate, ToolCallUpdateFields};

    #[test]
    fn a_tool_permission_question_shows_tool_and_input_escaped_and_only_yes_allows() {
        let request = ToolPermissionRequest {
            tool_name: "Bash\u{1b}[2J".to_owned(),
            input: serde_json::json!({"command": "rm -rf x\n\u{202e}"}),
        };
        let q = tool_question(&request);
        assert!(q.contains("tool Bash\\u{1b}[2J with input"), "{q}");
        assert!(!q.contains('\u{1b}') && !q.contains('\u{202e}'), "{q}");
        assert!(q.contains(r#"{"command":"rm -rf x\n"#), "{q}");
        let long = ToolPermissionRequest {
            tool_name: "T".to_owned(),
            input: serde_json::json!("x".repeat(MAX_SHOWN_CHARS * 2)),
        };
        assert!(tool_question(&long).contains('…'));
        assert_eq!(tool_choice(" Yes\n"), PermissionAnswer::Allow);
        assert_eq!(tool_choice("y"), PermissionAnswer::Allow);
        for no in ["", "n", "1", "yess"] {
            assert_eq!(
                tool_choice(no),
                PermissionAnswer::Deny(DENIED_BY_USER.to_owned())
            );
        }
    }

    fn request() -> RequestPermissionRequest {
        RequestPermissionRequest::new(
            "s1",
            ToolCallUpdate::new(
                "call-1",
                ToolCallUpdateFields::new().title("write hello.txt".to_owned()),
            ),
            vec![
                PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
                PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
            ],
        )
    }

    fn check(answer: &str, expect: Option<&str>) {
        let got = match choice(&request().options, answer) {
            Some(RequestPermissionOutcome::Selected(s)) => Some(s.option_id.to_string()),
            _ => None,
        };
        assert_eq!(got.as_deref(), expect, "{answer:?}");
    }

    #[test]
    fn typed_answers_select_options_by_number() {
        check("1\n", Some("allow"));
        check(" 2 ", Some("reject"));
        check("0", None);
        check("3", None);
        check("yes", None);
        check("", None);
    }

    #[test]
    fn the_question_shows_the_tool_call_and_options() {
        assert_eq!(
            question(&request()),
            "\nawp-host: the agent asks permission for tool call call-1 (unknown): write hello.txt\n  \
             1) [allow_once] Allow\n  2) [reject_once] Reject\nchoose a number (anything else rejects): "
        );
    }

    #[test]
    fn the_question_shows_the_tool_call_input_escaped() {
        let mut request = request();
        request.tool_call.fields.raw_input = Some(serde_json::json!({"command": "rm x\u{1b}[2K"}));
        assert!(
            question(&request).contains("\n  input: {\"command\":\"rm x\\u001b[2K\"}\n  1) "),
            "{}",
            question(&request)
        );
        assert!(
            question(&request)
                .chars()
                .all(|c| c == '\n' || !c.is_control())
        );
    }

    /// A hostile agent: escape sequences in the id, title and labels (cursor up, erase line, window title, hidden
    /// text, a bidi override, a newline) and an `allow_always` option labelled "Reject (safe)".
    #[test]
    fn the_question_escapes_agent_text_and_shows_the_protocol_kind_first() {
        let request = RequestPermissionRequest::new(
            "s1",
            ToolCallUpdate::new(
                "id\u{1b}[2K",
                ToolCallUpdateFields::new().title(
                    "rm -rf ~\u{1b}[1A\u{1b}]0;pwned\u{7}\u{1b}[8mhidden\u{202e}txt.exe\nfake line"
                        .to_owned(),
                ),
            ),
            vec![
                PermissionOption::new("yes", "Reject (safe)", PermissionOptionKind::AllowAlways),
                PermissionOption::new(
                    "no",
                    "No\r  2) [reject_once] Allow",
                    PermissionOptionKind::RejectOnce,
                ),
            ],
        );
        let text = question(&request);
        assert_eq!(
            text,
            "\nawp-host: the agent asks permission for tool call id\\u{1b}[2K (unknown): \
             rm -rf ~\\u{1b}[1A\\u{1b}]0;pwned\\u{7}\\u{1b}[8mhidden\\u{202e}txt.exe\\u{a}fake line\n  \
             1) [allow_always] Reject (safe)\n  \
             2) [reject_once] No\\u{d}  2) [reject_once] Allow\n\
             choose a number (anything else rejects): "
        );
        // Nothing the terminal would interpret: the only control characters are the question's own newlines.
        assert!(text.chars().all(|c| c == '\n' || !c.is_control()));
        assert_eq!(text.matches('\n').count(), 4);
    }

    #[test]
    fn long_agent_text_is_cut_at_the_limit() {
        let at = "a".repeat(MAX_SHOWN_CHARS);
        let past = "a".repeat(MAX_SHOWN_CHARS + 1);
        assert_eq!(shown(&at), at);
        let cut = shown(&past);
        assert_eq!(cut.chars().count(), MAX_SHOWN_CHARS);
        assert!(cut.ends_with('…'));
        // Escaping happens after the cut: an escape sequence at the end stays escaped.
        let tail = format!("{}\u{1b}", "a".repeat(MAX_SHOWN_CHARS - 2));
        assert_eq!(
            shown(&tail),
            format!("{}\\u{{1b}}", "a".repeat(MAX_SHOWN_CHARS - 2))
        );
    }
}
