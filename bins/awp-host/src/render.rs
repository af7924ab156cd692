//! Rendering of a turn: human text as it streams, JSON Lines events, or one JSON result object; plus the result
//! record DTO and the human status line.

use std::io::Write;

use agentwire_awp::NormalizedEvent;
use agentwire_host::TurnReport;
use agentwire_host::agents::{AgentSource, AgentSpec};
use agentwire_host::store::escape_controls;
use agentwire_host::turn::{tool_result_summary, tool_use_summary};
use serde_json::{Value, json};

/// Maximum characters of a rendered tool summary line.
pub const TOOL_LINE_CHARS: usize = 120;

/// Output format of `chat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Text as it arrives, tool summaries, status line on stderr.
    Human,
    /// One normalized event per line, then the result record.
    Jsonl,
    /// One result object (with the full text) at the end.
    Json,
}

/// Streams a turn to `out`, remembering the first write error (the turn goes on and is persisted regardless).
#[derive(Debug)]
pub struct Renderer<W: Write> {
    format: Format,
    out: W,
    at_line_start: bool,
    error: Option<std::io::Error>,
    /// Events rendered (for benches and diagnostics).
    pub events: u64,
}

impl<W: Write> Renderer<W> {
    /// A renderer writing to `out`.
    pub fn new(format: Format, out: W) -> Self {
        Self {
            format,
            out,
            at_line_start: true,
            error: None,
            events: 0,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let result = self.out.write_all(bytes).and_then(|()| self.out.flush());
        if let Err(e) = result {
            self.error = Some(e);
        }
    }

    fn line(&mut self, text: &str) {
        if !self.at_line_start {
            self.write(b"\n");
        }
        self.write(text.as_bytes());
        self.write(b"\n");
        self.at_line_start = true;
    }

    /// Renders one event.
    pub fn event(&mut self, event: &NormalizedEvent) {
        self.events += 1;
        match self.format {
            Format::Json => {}
            Format::Jsonl => {
                if matches!(event, NormalizedEvent::TurnCompleted(_)) {
                    return;
                }
                match serde_json::to_string(event) {
                    Ok(line) => self.line(&line),
                    Err(e) => {
                        if self.error.is_none() {
                            self.error = Some(std::io::Error::other(e));
                        }
                    }
                }
            }
            Format::Human => match event {
                NormalizedEvent::TextDelta { text } if !text.is_empty() => {
                    self.write(escape_controls(text, false).as_bytes());
                    self.at_line_start = text.ends_with('\n');
                }
                NormalizedEvent::ToolUse { name, input, .. } => {
                    let line = tool_use_summary(name, input, TOOL_LINE_CHARS);
                    self.line(&escape_controls(&line, true));
                }
                NormalizedEvent::ToolResult {
                    is_error, summary, ..
                } => {
                    let line = tool_result_summary(*is_error, summary, TOOL_LINE_CHARS);
                    self.line(&escape_controls(&line, true));
                }
                NormalizedEvent::TurnCompleted(_) if !self.at_line_start => {
                    self.write(b"\n");
                    self.at_line_start = true;
                }
                _ => {}
            },
        }
    }

    /// Writes the end of the turn: the result record (`--jsonl`), or the result object with `text` (`--json`).
    pub fn finish(&mut self, report: &TurnReport) {
        match self.format {
            Format::Human => {}
            Format::Jsonl => {
                let record = result_record(report, false).to_string();
                self.line(&record);
            }
            Format::Json => {
                let record = result_record(report, true).to_string();
                self.line(&record);
            }
        }
    }

    /// The first write error, if any.
    pub fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }
}

/// The terminal record:
/// `{"type":"result","thread_id":"th_…","run_id":"run_…","session_id":"…","status":"succeeded",
/// "usage":{"input_tokens":5,"output_tokens":11},"error":null,"duration_ms":42}`;
/// `error` is `{"code":"agent_error","detail":"fixture_failure"}` on failure; `with_text` adds `"text"`.
pub fn result_record(report: &TurnReport, with_text: bool) -> Value {
    let error = report.error_code.as_ref().map(|code| {
        let mut e = json!({"code": code});
        if let Some(detail) = &report.error_detail {
            e["detail"] = json!(detail);
        }
        if let Some(reason) = &report.error_reason {
            e["reason"] = json!(reason);
        }
        e
    });
    let mut record = json!({
        "type": "result",
        "thread_id": report.thread_id.as_str(),
        "run_id": report.run_id.as_str(),
        "session_id": report.session_id,
        "status": report.status.as_str(),
        "usage": report.usage,
        "error": error,
        "duration_ms": u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
    });
    if let Some(cost) = report.total_cost_usd {
        record["total_cost_usd"] = json!(cost);
    }
    if with_text {
        record["text"] = json!(report.assistant_text);
    }
    record
}

/// The human status line (stderr): `[succeeded · 5 in / 11 out tokens · $0.0123 · 0.04 s · thread th_… · run run_…]`
/// (the cost when the agent reported one).
pub fn status_line(report: &TurnReport) -> String {
    let mut parts = vec![report.status.as_str().to_owned()];
    if let Some(code) = &report.error_code {
        parts[0] = format!("{} ({code})", report.status.as_str());
    }
    if let Some(u) = &report.usage {
        parts.push(format!(
            "{} in / {} out tokens",
            u.input_tokens, u.output_tokens
        ));
    }
    if let Some(cost) = report.total_cost_usd {
        parts.push(agentwire_host::export::format_cost(cost));
    }
    parts.push(format!("{:.2} s", report.duration.as_secs_f64()));
    parts.push(format!("thread {}", report.thread_id));
    parts.push(format!("run {}", report.run_id));
    format!("[{}]", parts.join(" · "))
}

/// The message of a failed run of `agent`, for `awp-host: error: <message> (<code>)`.
pub fn failure_message(code: &str, detail: Option<&str>, agent: &AgentSpec) -> String {
    let base = match code {
        "agent_error" => "the agent reported an error",
        "agent_exited_mid_turn" => "the agent exited before finishing the turn",
        "agent_idle_timeout" => "the agent wrote nothing within the idle timeout; it was stopped",
        "agent_first_output_timeout" => {
            return format!(
                "the agent printed no protocol output ({}) and was stopped; it may speak another protocol \
                 ({}) or be waiting for a login (run it once by hand)",
                detail.unwrap_or("within its first-output timeout"),
                protocol_hint(agent)
            );
        }
        "stdout_line_too_long" => "the agent wrote a stdout line over the limit; it was stopped",
        "cancelled" => "the turn was cancelled",
        "aborted" => "the turn was aborted by a second signal",
        "spawn_failed" => "the agent could not be started",
        "invalid_session_id" => {
            "the agent reported an invalid session id; the thread cannot be resumed"
        }
        "stdin_write_failed" => "the turn could not be written to the agent",
        _ => "the turn failed",
    };
    match detail {
        Some(d) if !d.is_empty() => format!("{base}: {d}"),
        _ => base.to_owned(),
    }
}

/// Where to check the protocol of `agent`: its setting (as configured) and the `check` command that tests it.
fn protocol_hint(agent: &AgentSpec) -> String {
    let check = format!("run `awp-host check --agent {}`", agent.name);
    match agent.source {
        AgentSource::ConfigFile => format!("check `protocol` in agents.toml, or {check}"),
        AgentSource::Environment => {
            format!("check {}, or {check}", agentwire_awp::launch::VAR_PROTOCOL)
        }
        // Its protocol is fixed; the check still shows what it prints.
        _ => check,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_awp::{TurnOutcome, TurnStatus};

    fn check(format: Format, events: &[NormalizedEvent], expect: &str) {
        let mut r = Renderer::new(format, Vec::new());
        for e in events {
            r.event(e);
        }
        assert_eq!(String::from_utf8(r.out).unwrap(), expect);
    }

    #[test]
    fn human_rendering_puts_tool_lines_on_their_own_line() {
        let text = |t: &str| NormalizedEvent::TextDelta { text: t.into() };
        let tool = NormalizedEvent::ToolUse {
            id: "t".into(),
            name: "Bash".into(),
            input: json!({"command": "ls"}),
        };
        let done = NormalizedEvent::TurnCompleted(TurnOutcome::new(TurnStatus::Success));
        check(
            Format::Human,
            &[text("Let me look"), tool, text("Done."), done.clone()],
            "Let me look\n⚙ Bash {\"command\":\"ls\"}\nDone.\n",
        );
        check(
            Format::Jsonl,
            &[text("a"), done.clone()],
            "{\"type\":\"text_delta\",\"text\":\"a\"}\n",
        );
        check(Format::Json, &[text("a"), done], "");
    }
}
