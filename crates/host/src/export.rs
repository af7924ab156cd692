//! A stored thread as data: the JSON shapes of threads, runs and messages (shared by `threads show --json`,
//! `threads list --json` and `threads export`), and the two export formats.
//!
//! - [`markdown`]: a readable transcript — a header (title, id, agent, directory, dates), then each run as a
//!   `## Turn N` section with the prompt, the answer and tool lines, and a status line (status, tokens, cost, and
//!   why it failed).
//! - [`jsonl`]: one JSON object per line — first `{"type":"thread",…}` (the [`thread_json`] fields), then for each
//!   run oldest first `{"type":"run",…}` (the [`run_json`] fields) followed by that run's messages
//!   `{"type":"message","id","run_id","role","content","created_at"}`, oldest first.
//!
//! Times are RFC 3339 UTC with seconds (`2026-12-01T13:04:05Z`). Text is exact in JSON; in Markdown it is the
//! stored text as written (a transcript for people; a terminal shows it through `escape_controls` only when printed
//! by `threads show`).

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::store::{MessageRecord, Role, RunRecord, RunStatus, ThreadDetail, ThreadRecord};

/// `ms` (milliseconds since the Unix epoch) as RFC 3339 UTC with seconds.
pub fn format_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A thread: `{"id","agent","title","session_id","created_at","updated_at","run_count","cwd","last_run_status"}`
/// (`last_run_status`: the latest run's status, `null` without runs).
pub fn thread_json(t: &ThreadRecord) -> Value {
    json!({
        "id": t.id.as_str(),
        "agent": t.agent,
        "title": t.title,
        "session_id": t.session_id,
        "created_at": format_ms(t.created_at_ms),
        "updated_at": format_ms(t.updated_at_ms),
        "run_count": t.run_count,
        "cwd": t.cwd,
        "last_run_status": t.last_run_status.map(RunStatus::as_str),
    })
}

/// A run: `{"id","agent","model","status","started_at","ended_at","resumed_session_id","session_id",
/// "usage":{"input_tokens","output_tokens","cache_read_input_tokens","cache_creation_input_tokens"}|null,
/// "error":{"code","reason"}|null,"total_cost_usd"}`.
pub fn run_json(r: &RunRecord) -> Value {
    json!({
        "id": r.id.as_str(),
        "agent": r.agent,
        "model": r.model,
        "status": r.status.as_str(),
        "started_at": format_ms(r.started_at_ms),
        "ended_at": r.ended_at_ms.map(format_ms),
        "resumed_session_id": r.resumed_session_id,
        "session_id": r.session_id,
        "usage": r.usage.as_ref().map(|u| json!({
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
        })),
        "error": r.error_code.as_ref().map(|c| json!({"code": c, "reason": r.error_reason})),
        "total_cost_usd": r.total_cost_usd,
    })
}

/// A message: `{"id","run_id","role","content","created_at"}`.
pub fn message_json(m: &MessageRecord) -> Value {
    json!({
        "id": m.id,
        "run_id": m.run_id.as_str(),
        "role": m.role.as_str(),
        "content": m.content,
        "created_at": format_ms(m.created_at_ms),
    })
}

/// `value` with `"type": kind` as its first field.
fn typed(kind: &str, value: Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("type".to_owned(), Value::from(kind));
    if let Value::Object(fields) = value {
        out.extend(fields);
    }
    Value::Object(out)
}

/// The thread as JSON Lines (see the module docs for the records); every line ends with `\n`.
pub fn jsonl(d: &ThreadDetail) -> String {
    let mut out = String::new();
    let mut push = |v: Value| {
        out.push_str(&v.to_string());
        out.push('\n');
    };
    push(typed("thread", thread_json(&d.thread)));
    for run in &d.runs {
        push(typed("run", run_json(run)));
        for m in d.messages.iter().filter(|m| m.run_id == run.id) {
            push(typed("message", message_json(m)));
        }
    }
    out
}

/// One line of a run's totals: `succeeded · 12 in / 40 out · $0.0123` (+ ` · error CODE: reason`).
pub fn run_summary(r: &RunRecord) -> String {
    let mut parts = vec![r.status.as_str().to_owned()];
    if let Some(u) = &r.usage {
        parts.push(format!("{} in / {} out", u.input_tokens, u.output_tokens));
    }
    if let Some(cost) = r.total_cost_usd {
        parts.push(format_cost(cost));
    }
    if let Some(code) = &r.error_code {
        match &r.error_reason {
            Some(reason) => parts.push(format!("error {code}: {reason}")),
            None => parts.push(format!("error {code}")),
        }
    }
    parts.join(" · ")
}

/// A cost in USD as `$0.0123` (four decimals: agent costs are often below a cent).
pub fn format_cost(usd: f64) -> String {
    format!("${usd:.4}")
}

/// The sum of the runs' reported costs, `None` when no run reported one.
pub fn total_cost(runs: &[RunRecord]) -> Option<f64> {
    let costs: Vec<f64> = runs.iter().filter_map(|r| r.total_cost_usd).collect();
    (!costs.is_empty()).then(|| costs.iter().sum())
}

/// The thread as a Markdown transcript (see the module docs).
pub fn markdown(d: &ThreadDetail) -> String {
    let t = &d.thread;
    let mut s = format!("# {}\n\n", t.title);
    s.push_str(&format!("- thread: `{}`\n- agent: {}\n", t.id, t.agent));
    if let Some(cwd) = &t.cwd {
        s.push_str(&format!("- directory: `{cwd}`\n"));
    }
    s.push_str(&format!(
        "- created: {}\n- updated: {}\n",
        format_ms(t.created_at_ms),
        format_ms(t.updated_at_ms)
    ));
    if let Some(total) = total_cost(&d.runs) {
        s.push_str(&format!("- cost: {}\n", format_cost(total)));
    }
    for (n, run) in d.runs.iter().enumerate() {
        s.push_str(&format!(
            "\n## Turn {} — {}\n",
            n + 1,
            format_ms(run.started_at_ms)
        ));
        for m in d.messages.iter().filter(|m| m.run_id == run.id) {
            match m.role {
                Role::User => {
                    s.push_str("\n**You:**\n\n");
                    s.push_str(&quote(&m.content));
                }
                Role::Assistant => {
                    s.push_str(&format!("\n**{}:**\n\n", run.agent));
                    s.push_str(m.content.trim_end_matches('\n'));
                    s.push('\n');
                }
                Role::Tool => {
                    s.push_str(&format!(
                        "\n`{}`\n",
                        tool_line(&m.content).replace('`', "'")
                    ));
                }
            }
        }
        if run.status != RunStatus::Succeeded || run.usage.is_some() {
            s.push_str(&format!("\n_{}_ (`{}`)\n", run_summary(run), run.id));
        }
    }
    s
}

/// A stored tool summary as shown: it already starts with `⚙ ` (a tool use) or `↳ ` (a tool result), as
/// `turn::tool_use_summary` / `turn::tool_result_summary` write it; anything else is a tool use and gets `⚙ `.
fn tool_line(content: &str) -> String {
    if content.starts_with('⚙') || content.starts_with('↳') {
        content.to_owned()
    } else {
        format!("⚙ {content}")
    }
}

/// `text` as a Markdown block quote (every line prefixed with `> `).
fn quote(text: &str) -> String {
    let mut out = String::new();
    for line in text.trim_end_matches('\n').split('\n') {
        if line.is_empty() {
            out.push_str(">\n");
        } else {
            out.push_str("> ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_lines_keep_their_one_symbol() {
        assert_eq!(tool_line("⚙ Bash {}"), "⚙ Bash {}");
        assert_eq!(tool_line("↳ hi-from-tool"), "↳ hi-from-tool");
        assert_eq!(tool_line("↳ error: boom"), "↳ error: boom");
        assert_eq!(tool_line("Bash {}"), "⚙ Bash {}");
    }
}
