//! Claude Code's control protocol (the side channel the Claude Agent SDKs speak over the same stdin/stdout as
//! stream-json): pure builders for the host's lines and a parser for the agent's.
//!
//! Wire shapes, checked against the Python SDK (`anthropics/claude-agent-sdk-python`,
//! `src/claude_agent_sdk/_internal/query.py`: `Query.initialize`, `Query.interrupt`, `_send_control_request`,
//! `_read_messages`, `_handle_control_request`; `types.py`: `SDKControlRequest`, `SDKControlResponse`):
//!
//! ```text
//! host → agent  {"type":"control_request","request_id":"req_1_…","request":{"subtype":"initialize","hooks":null}}
//! host → agent  {"type":"control_request","request_id":"req_2_…","request":{"subtype":"interrupt"}}
//! agent → host  {"type":"control_response","response":{"subtype":"success","request_id":"req_1_…","response":{…}}}
//! agent → host  {"type":"control_response","response":{"subtype":"error","request_id":"req_1_…","error":"…"}}
//! agent → host  {"type":"control_request","request_id":"…","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{…}}}
//! host → agent  {"type":"control_response","response":{"subtype":"success","request_id":"…","response":{"behavior":"allow","updatedInput":{…}}}}
//! host → agent  {"type":"control_response","response":{"subtype":"success","request_id":"…","response":{"behavior":"deny","message":"…"}}}
//! agent → host  {"type":"control_cancel_request","request_id":"…"}
//! ```
//!
//! `can_use_tool` requests are only sent by a CLI launched with `--permission-prompt-tool stdio`
//! ([`PERMISSION_PROMPT_TOOL_ARGS`], as the SDK's `subprocess_cli.py` does when a `can_use_tool` callback is set).

use serde_json::{Map, Value, json};

/// Launch arguments that make Claude Code ask the host (with `can_use_tool` control requests) before using a
/// tool instead of applying its own permission prompt.
pub const PERMISSION_PROMPT_TOOL_ARGS: [&str; 2] = ["--permission-prompt-tool", "stdio"];

/// The `request_id` of the `n`th request a host sends: `req_<n>_<salt as 8 hex digits>` (the SDK's
/// `req_{counter}_{random hex}` shape; `salt` keeps ids of different processes apart).
pub fn request_id(n: u64, salt: u32) -> String {
    format!("req_{n}_{salt:08x}")
}

/// A `control_request` line (without the newline) with `request` as its body (`{"subtype":…,…}`).
pub fn request_line(request_id: &str, request: Value) -> String {
    json!({"type": "control_request", "request_id": request_id, "request": request}).to_string()
}

/// The `initialize` request line (no hooks, as the SDK sends when none are configured).
pub fn initialize_line(request_id: &str) -> String {
    request_line(
        request_id,
        json!({"subtype": "initialize", "hooks": Value::Null}),
    )
}

/// The `interrupt` request line.
pub fn interrupt_line(request_id: &str) -> String {
    request_line(request_id, json!({"subtype": "interrupt"}))
}

/// A successful `control_response` line answering `request_id` with `response`.
pub fn success_line(request_id: &str, response: Value) -> String {
    json!({"type": "control_response", "response": {
        "subtype": "success", "request_id": request_id, "response": response}})
    .to_string()
}

/// An error `control_response` line answering `request_id`.
pub fn error_line(request_id: &str, error: &str) -> String {
    json!({"type": "control_response", "response": {
        "subtype": "error", "request_id": request_id, "error": error}})
    .to_string()
}

/// The answer to a `can_use_tool` request.
#[derive(Clone, Debug, PartialEq)]
pub enum PermissionAnswer {
    /// Run the tool with its input unchanged (`{"behavior":"allow","updatedInput":<input>}`).
    Allow,
    /// Refuse it; the message is shown to the model (`{"behavior":"deny","message":…}`).
    Deny(String),
}

/// The `control_response` line answering a `can_use_tool` request `request_id` whose tool input was `input`.
pub fn permission_line(request_id: &str, input: &Value, answer: &PermissionAnswer) -> String {
    let body = match answer {
        PermissionAnswer::Allow => json!({"behavior": "allow", "updatedInput": input}),
        PermissionAnswer::Deny(message) => json!({"behavior": "deny", "message": message}),
    };
    success_line(request_id, body)
}

/// One control-protocol line from the agent.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ControlMessage {
    /// The agent asks the host something (`can_use_tool`, `hook_callback`, `mcp_message`, …).
    Request {
        /// The id to answer with.
        request_id: String,
        /// `request.subtype` (empty when missing).
        subtype: String,
        /// The whole `request` object.
        request: Map<String, Value>,
    },
    /// The answer to one of the host's requests.
    Response {
        /// The host's request id.
        request_id: String,
        /// `Ok(response)` for `subtype: success` (the inner `response`, `null` when absent), `Err(error text)`
        /// for `subtype: error` (or any other subtype).
        result: Result<Value, String>,
    },
    /// The agent withdrew one of its requests.
    CancelRequest {
        /// The withdrawn request's id.
        request_id: String,
    },
}

impl ControlMessage {
    /// Parses a line that may be a control message: `None` for any other line (including unparsable JSON and
    /// control lines without a string `request_id`, which stay with the ordinary event parser).
    pub fn parse(line: &[u8]) -> Option<ControlMessage> {
        // Cheap pre-check: ordinary stream-json lines never reach the JSON parser twice.
        if !line.windows(9).any(|w| w == b"\"control_") {
            return None;
        }
        let Value::Object(obj) = serde_json::from_slice::<Value>(line).ok()? else {
            return None;
        };
        let text =
            |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
        match obj.get("type").and_then(Value::as_str)? {
            "control_request" => {
                let request = obj.get("request").and_then(Value::as_object)?.clone();
                Some(ControlMessage::Request {
                    request_id: text(&obj, "request_id")?,
                    subtype: text(&request, "subtype").unwrap_or_default(),
                    request,
                })
            }
            "control_response" => {
                let response = obj.get("response").and_then(Value::as_object)?;
                let request_id = text(response, "request_id")?;
                let result = if text(response, "subtype").as_deref() == Some("success") {
                    Ok(response.get("response").cloned().unwrap_or(Value::Null))
                } else {
                    Err(text(response, "error").unwrap_or_else(|| "unknown error".to_owned()))
                };
                Some(ControlMessage::Response { request_id, result })
            }
            "control_cancel_request" => Some(ControlMessage::CancelRequest {
                request_id: text(&obj, "request_id")?,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lines_have_the_sdk_shapes() {
        assert_eq!(request_id(1, 0xab), "req_1_000000ab");
        let init: Value = serde_json::from_str(&initialize_line("req_1_x")).unwrap();
        assert_eq!(
            init,
            json!({"type":"control_request","request_id":"req_1_x","request":{"subtype":"initialize","hooks":null}})
        );
        let allow: Value = serde_json::from_str(&permission_line(
            "r",
            &json!({"command":"ls"}),
            &PermissionAnswer::Allow,
        ))
        .unwrap();
        assert_eq!(
            allow,
            json!({"type":"control_response","response":{"subtype":"success","request_id":"r",
                "response":{"behavior":"allow","updatedInput":{"command":"ls"}}}})
        );
        let deny: Value = serde_json::from_str(&permission_line(
            "r",
            &Value::Null,
            &PermissionAnswer::Deny("no".into()),
        ))
        .unwrap();
        assert_eq!(
            deny["response"]["response"],
            json!({"behavior":"deny","message":"no"})
        );
    }

    #[test]
    fn agent_control_lines_parse_and_others_do_not() {
        let req = br#"{"type":"control_request","request_id":"a","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{}}}"#;
        let Some(ControlMessage::Request {
            request_id,
            subtype,
            request,
        }) = ControlMessage::parse(req)
        else {
            panic!("not a request");
        };
        assert_eq!(
            (request_id.as_str(), subtype.as_str()),
            ("a", "can_use_tool")
        );
        assert_eq!(request["tool_name"], "Bash");
        assert_eq!(
            ControlMessage::parse(
                br#"{"type":"control_response","response":{"subtype":"error","request_id":"q","error":"boom"}}"#
            ),
            Some(ControlMessage::Response { request_id: "q".into(), result: Err("boom".into()) })
        );
        assert_eq!(
            ControlMessage::parse(
                br#"{"type":"control_response","response":{"subtype":"success","request_id":"q"}}"#
            ),
            Some(ControlMessage::Response {
                request_id: "q".into(),
                result: Ok(Value::Null)
            })
        );
        assert_eq!(
            ControlMessage::parse(br#"{"type":"control_cancel_request","request_id":"z"}"#),
            Some(ControlMessage::CancelRequest {
                request_id: "z".into()
            })
        );
        assert_eq!(
            ControlMessage::parse(br#"{"type":"result","x":"control_"}"#),
            None
        );
        assert_eq!(
            ControlMessage::parse(br#"{"type":"control_request","request":{}}"#),
            None
        );
        assert_eq!(ControlMessage::parse(b"\"control_ not json"), None);
    }
}
