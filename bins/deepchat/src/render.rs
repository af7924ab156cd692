//! Human-readable rendering of results and run events (text mode). Machine modes print envelopes as-is.
//!
//! Every server-supplied string passes [`sanitize`] first: no control characters (other than tab and newline)
//! and no bidirectional overrides reach the terminal (DeepChat `src/cli/run.ts`, `sanitizeTerminalText`).
//! The CLI never emits ANSI sequences itself.

use std::fmt::Write as _;

use agentwire_local_control::contract::runs::RunEvent;
use serde_json::Value;

/// Removes C0/C1 controls (except `\t`, `\n`), DEL, and bidi controls (U+061C, U+200E/F, U+202A..E, U+2066..9).
pub fn sanitize(text: &str) -> String {
    text.chars()
        .filter(|&c| {
            let cp = c as u32;
            let control =
                cp == 0x0d || (cp <= 0x1f && c != '\t' && c != '\n') || (0x7f..=0x9f).contains(&cp);
            let bidi = cp == 0x061c
                || cp == 0x200e
                || cp == 0x200f
                || (0x202a..=0x202e).contains(&cp)
                || (0x2066..=0x2069).contains(&cp);
            !control && !bidi
        })
        .collect()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".to_owned(),
        other => other.to_string(),
    }
}

fn messages(out: &mut String, result: &Value) {
    if let Some(list) = result.get("messages").and_then(Value::as_array) {
        for m in list {
            let _ = writeln!(
                out,
                "[{}] {}: {}",
                s(m, "status"),
                s(m, "role"),
                s(m, "text")
            );
        }
    }
    if result.get("hasMore").and_then(Value::as_bool) == Some(true) {
        let cursor = result
            .get("nextCursor")
            .map(Value::to_string)
            .unwrap_or_default();
        let _ = writeln!(out, "More messages: --cursor '{cursor}'");
    }
}

/// Text for a successful `method` with (already validated) `result`.
pub fn result(method: &str, result: &Value) -> String {
    if let Some(text) = crate::providers::render(method, result) {
        return sanitize(&text);
    }
    if let Some(text) = crate::ocr::render(method, result) {
        return sanitize(&text);
    }
    let mut out = String::new();
    match method {
        "cli.version" => {
            let _ = writeln!(out, "DeepChat {}", s(result, "appVersion"));
            let _ = writeln!(
                out,
                "Protocol {}, surface {}",
                scalar(&result["protocolVersion"]),
                scalar(&result["surfaceVersion"])
            );
        }
        "cli.status" => {
            for (label, key) in [
                ("Running", "running"),
                ("PID", "pid"),
                ("Started at (ms)", "startedAt"),
                ("Uptime (ms)", "uptimeMs"),
                ("Endpoint", "endpointKind"),
                ("Active connections", "activeConnections"),
                ("Pending requests", "pendingRequests"),
            ] {
                let _ = writeln!(out, "{label}: {}", scalar(&result[key]));
            }
        }
        "cli.capabilities" => {
            for c in result["capabilities"].as_array().into_iter().flatten() {
                let callers: Vec<String> = c["callers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(scalar)
                    .collect();
                let _ = writeln!(
                    out,
                    "{}  {}  approval={}  callers={}",
                    s(c, "method"),
                    s(c, "transport"),
                    s(c, "approval"),
                    callers.join(",")
                );
            }
        }
        "cli.doctor" => {
            let healthy = result["healthy"].as_bool().unwrap_or(false);
            let _ = writeln!(out, "Healthy: {}", if healthy { "yes" } else { "no" });
            for c in result["checks"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "[{}] {}: {}",
                    s(c, "status"),
                    s(c, "id"),
                    s(c, "message")
                );
            }
        }
        "sessions.runDetached" => {
            let run = s(result, "runId");
            let _ = writeln!(out, "Run {run} started ({})", s(result, "status"));
            let _ = writeln!(out, "Thread: {}", s(result, "sessionId"));
            let _ = writeln!(out, "Watch: deepchat run watch --run {run}");
        }
        "runs.get" => {
            let _ = writeln!(
                out,
                "Run {} ({}, {})",
                s(result, "runId"),
                s(result, "status"),
                s(result, "phase")
            );
            let _ = writeln!(
                out,
                "Agent: {}  Thread: {}",
                s(result, "agentId"),
                s(result, "sessionId")
            );
            if !s(result, "title").is_empty() {
                let _ = writeln!(out, "Title: {}", s(result, "title"));
            }
            if !s(result, "stopReason").is_empty() {
                let _ = writeln!(out, "Stopped: {}", s(result, "stopReason"));
            }
            messages(&mut out, result);
        }
        "runs.cancel" => {
            let requested = result["cancelRequested"].as_bool().unwrap_or(false);
            let what = if requested {
                "cancel requested"
            } else {
                "already finished"
            };
            let _ = writeln!(
                out,
                "Run {}: {what} ({})",
                s(result, "runId"),
                s(result, "status")
            );
        }
        "events.subscribe" => {
            if !s(result, "stopReason").is_empty() {
                let _ = writeln!(out, "Run stopped: {}", s(result, "stopReason"));
            }
            let _ = writeln!(out, "Resume with: --cursor {}", s(result, "lastCursor"));
        }
        "artifacts.describe" | "artifacts.read" | "runs.exportTranscript" => {
            let a = &result["artifact"];
            for key in [
                "id",
                "filename",
                "mimeType",
                "size",
                "sha256",
                "owner",
                "createdAt",
                "expiresAt",
            ] {
                let _ = writeln!(out, "{key}: {}", scalar(&a[key]));
            }
        }
        "artifacts.delete" => out.push_str("Deleted\n"),
        "settings.getPublic" | "settings.updatePublic" => {
            if let Some(values) = result["values"].as_object() {
                for (k, v) in values {
                    let _ = writeln!(out, "{k}: {}", scalar(v));
                }
            }
        }
        "threads.list" => {
            for t in result["threads"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{}  {}  {}  runs={}  {}",
                    s(t, "threadId"),
                    s(t, "agentId"),
                    s(t, "status"),
                    scalar(&t["runCount"]),
                    s(t, "title")
                );
            }
            if let Some(c) = result["nextCursor"].as_str() {
                let _ = writeln!(out, "More threads: --cursor {c}");
            }
        }
        "threads.get" => {
            let t = &result["thread"];
            let _ = writeln!(
                out,
                "Thread {} ({}, agent {})",
                s(t, "threadId"),
                s(t, "status"),
                s(t, "agentId")
            );
            messages(&mut out, result);
        }
        "approvals.listPending" => {
            let list = result["approvals"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            if list.is_empty() {
                out.push_str("No pending approvals\n");
            }
            for a in list {
                let _ = writeln!(
                    out,
                    "{}  {}  {}",
                    s(a, "approvalId"),
                    s(a, "method"),
                    s(a, "summary")
                );
            }
            if result["rendererAttached"].as_bool() == Some(false) {
                out.push_str("No approvals console is attached: sensitive changes fail at once\n");
            }
        }
        m if crate::compute::renders(m) => out.push_str(&crate::compute::render_result(m, result)),
        _ => {
            let _ = writeln!(out, "{result}");
        }
    }
    sanitize(&out)
}

/// The wire spelling of an enum value (`generating`, `awaiting_interaction`, …).
fn wire(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// One line for a run event in text mode, or `None` for events not worth a line.
pub fn event(event: &RunEvent) -> Option<String> {
    let line = match event {
        RunEvent::Created(e) => format!("run {} created ({})", e.run_id, wire(&e.status)),
        RunEvent::TurnAccepted(e) => format!("run {} accepted", e.run_id),
        RunEvent::TurnFailed(e) => format!("run {} failed: {}", e.run_id, e.error),
        RunEvent::CancelRequested(e) => format!("run {} cancel requested", e.run_id),
        RunEvent::Snapshot(e) => format!(
            "run {} snapshot: {}, {} message(s)",
            e.run.run_id,
            wire(&e.run.phase),
            e.run.messages.len()
        ),
        RunEvent::ChatCompleted(_) => "assistant message completed".to_owned(),
        RunEvent::ChatFailed(e) => format!("assistant message failed: {}", e.error),
        RunEvent::StatusChanged(e) => format!("status: {}", wire(&e.status)),
        _ => return None,
    };
    Some(sanitize(&line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terminal_controls_are_removed() {
        assert_eq!(sanitize("a\u{1b}[31mb\rc\td\ne"), "a[31mbc\td\ne");
        assert_eq!(sanitize("x\u{202e}y\u{2066}z\u{9b}"), "xyz");
        assert_eq!(sanitize("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn version_and_run_text_match_deepchat() {
        let v = result(
            "cli.version",
            &json!({"appVersion":"9.8.7","protocolVersion":1,"surfaceVersion":2}),
        );
        assert!(v.contains("DeepChat 9.8.7"));
        assert!(v.contains("Protocol 1, surface 2"));
        let r = result(
            "sessions.runDetached",
            &json!({"runId":"run-1","sessionId":"run-1","status":"generating","requestId":null,"messageId":null,"createdAt":1}),
        );
        assert!(r.contains("Run run-1 started (generating)"));
        assert!(r.contains("deepchat run watch --run run-1"));
    }

    #[test]
    fn server_text_is_sanitized() {
        let r = result(
            "runs.get",
            &json!({"runId":"r","sessionId":"s","agentId":"a","title":"\u{1b}]0;pwned\u{7}","status":"idle","phase":"terminal",
                    "providerId":"","modelId":"","createdAt":1,"updatedAt":1,
                    "messages":[{"id":"m","role":"assistant","status":"sent","text":"ok\u{1b}[2J","textTruncated":false,"createdAt":1,"updatedAt":1}],
                    "nextCursor":null,"hasMore":false}),
        );
        assert!(!r.contains('\u{1b}') && !r.contains('\u{7}'), "{r:?}");
        assert!(r.contains("assistant: ok[2J"));
    }

    #[test]
    fn run_events_in_text() {
        let e = RunEvent::decode(
            "sessions.status.changed",
            json!({"sessionId":"s","status":"idle","version":1}),
        )
        .unwrap();
        assert_eq!(event(&e).as_deref(), Some("status: idle"));
    }
}
