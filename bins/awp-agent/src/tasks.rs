//! Managed tasks: the one tool this agent can offer, `awp_run_managed_task`, backed by a control plane's task API
//! (`awp-host serve --tasks-listen`, or any server with the same `POST /v1/tasks` / `GET /v1/tasks/{id}`).
//!
//! Enabled only when all three of `AWP_AGENT_MANAGED_TASKS_OPT_IN=1`, `AWP_CONTROL_PLANE_URL` and
//! `AWP_CONTROL_PLANE_API_KEY` are set (non-empty); otherwise the agent is chat-only. The URL must be the server's
//! origin (`http(s)://host:port`, no path, credentials or query); plain `http://` only to loopback hosts, and a
//! remote `https://` host also needs `AWP_AGENT_REMOTE_API_OPT_IN=1`.
//!
//! A call submits the argv (never given to a shell) with an idempotency key derived from the session id, the turn
//! number, the tool call id and the arguments, then polls until the task ends or the wait runs out. A wait that
//! runs out says the task may still be running (nothing is cancelled); a transport failure after submission says
//! the outcome is unknown. The worker's executable allow-list decides what runs.
//!
//! Source: AWP agent CLI protocol, section "The checked-in reference CLI…" (`awp-agent-cli.mjs`, whose tool
//! schema and argv bounds this follows), and issue 9's task API.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The tool's name, as advertised to the model and in `init`'s `tools`.
pub const TOOL_NAME: &str = "awp_run_managed_task";

/// Bounds of the tool. Every field documents its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskToolLimits {
    /// Most argv items. Default 32; more is `managed_task_argv_invalid`.
    pub max_argv_items: usize,
    /// Longest argv item, in bytes. Default 8192; longer is `managed_task_argv_invalid`.
    pub max_arg_bytes: usize,
    /// Most argv bytes in all. Default 64 KiB; more is `managed_task_argv_too_large`.
    pub max_argv_bytes: usize,
    /// Largest `timeout_seconds` (the task's timeout and the wait). Default 300; the smallest is 1.
    pub max_timeout_seconds: u64,
    /// `timeout_seconds` when the model gives none. Default 60.
    pub default_timeout_seconds: u64,
    /// Extra wait after `timeout_seconds` for the worker to stop a timed-out task and report it. Default 10 s.
    pub wait_grace: Duration,
    /// Bytes of stdout and of stderr passed to the model, each. Default 16 KiB; longer output is cut (at a
    /// character boundary) and flagged `*_truncated`.
    pub max_output_bytes: usize,
    /// Timeout of each HTTP request to the control plane. Default 10 s.
    pub request_timeout: Duration,
    /// Largest control-plane response body, in bytes. Default 2 MiB.
    pub max_response_bytes: usize,
}

impl Default for TaskToolLimits {
    fn default() -> Self {
        Self {
            max_argv_items: 32,
            max_arg_bytes: 8192,
            max_argv_bytes: 64 * 1024,
            max_timeout_seconds: 300,
            default_timeout_seconds: 60,
            wait_grace: Duration::from_secs(10),
            max_output_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(10),
            max_response_bytes: 2 * 1024 * 1024,
        }
    }
}

/// Why the managed-task configuration was refused at startup (a `startup_error` with this code).
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TaskConfigError {
    /// Not an absolute http(s) origin without credentials, path, query or fragment.
    #[error("AWP_CONTROL_PLANE_URL is not a valid http(s) origin")]
    UrlInvalid,
    /// Plain `http://` to a host that is not loopback.
    #[error("AWP_CONTROL_PLANE_URL uses plain http to a non-loopback host")]
    UrlRejected,
    /// A remote host without `AWP_AGENT_REMOTE_API_OPT_IN=1`.
    #[error("a remote control plane needs AWP_AGENT_REMOTE_API_OPT_IN=1")]
    RemoteNotAllowed,
    /// The key is not 16 to 4096 bytes without whitespace or control characters.
    #[error("AWP_CONTROL_PLANE_API_KEY is not a valid key")]
    KeyInvalid,
    /// The HTTP client could not be built.
    #[error("http client could not be built")]
    Client,
}

impl TaskConfigError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            TaskConfigError::UrlInvalid => "control_plane_url_invalid",
            TaskConfigError::UrlRejected => "control_plane_url_rejected",
            TaskConfigError::RemoteNotAllowed => "control_plane_remote_not_allowed",
            TaskConfigError::KeyInvalid => "control_plane_key_invalid",
            TaskConfigError::Client => "control_plane_client_failed",
        }
    }
}

/// The managed-task client. `Debug` never shows the key.
pub struct ManagedTasks {
    client: reqwest::Client,
    base: String,
    key: String,
    limits: TaskToolLimits,
}

impl std::fmt::Debug for ManagedTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedTasks")
            .field("base", &self.base)
            .field("key", &"***")
            .finish()
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The control plane's origin from `url`, after the rules of the module docs.
fn control_plane_origin(url: &str, remote_opt_in: bool) -> Result<String, TaskConfigError> {
    let parsed = reqwest::Url::parse(url).map_err(|_| TaskConfigError::UrlInvalid)?;
    if !parsed.username().is_empty()
        || parsed.password().is_some()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
        || !matches!(parsed.path(), "" | "/")
    {
        return Err(TaskConfigError::UrlInvalid);
    }
    let host = parsed.host_str().ok_or(TaskConfigError::UrlInvalid)?;
    let local = is_loopback(host);
    match parsed.scheme() {
        "http" if local => {}
        "http" => return Err(TaskConfigError::UrlRejected),
        "https" if local || remote_opt_in => {}
        "https" => return Err(TaskConfigError::RemoteNotAllowed),
        _ => return Err(TaskConfigError::UrlInvalid),
    }
    Ok(parsed.origin().ascii_serialization())
}

impl ManagedTasks {
    /// The client the environment configures, `None` (chat-only) unless all three variables are set.
    ///
    /// # Errors
    /// A [`TaskConfigError`] when they are set but unusable.
    pub fn from_vars(
        lookup: impl Fn(&str) -> Option<String>,
        limits: TaskToolLimits,
    ) -> Result<Option<Self>, TaskConfigError> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let (Some(opt_in), Some(url), Some(key)) = (
            var("AWP_AGENT_MANAGED_TASKS_OPT_IN"),
            var("AWP_CONTROL_PLANE_URL"),
            var("AWP_CONTROL_PLANE_API_KEY"),
        ) else {
            return Ok(None);
        };
        if opt_in != "1" {
            return Ok(None);
        }
        let remote_opt_in = var("AWP_AGENT_REMOTE_API_OPT_IN").as_deref() == Some("1");
        let base = control_plane_origin(&url, remote_opt_in)?;
        if key.len() < 16
            || key.len() > 4096
            || key.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(TaskConfigError::KeyInvalid);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(limits.request_timeout)
            .timeout(limits.request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| TaskConfigError::Client)?;
        Ok(Some(Self {
            client,
            base,
            key,
            limits,
        }))
    }

    /// The tool in the OpenAI `tools` format.
    pub fn tool_definition(&self) -> Value {
        let l = &self.limits;
        json!({
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": "Run one operator-allow-listed command (an argv array, never a shell command line) on the configured trusted worker and wait for its result. Not a sandbox: use only for explicitly requested trusted execution.",
                "parameters": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["argv"],
                    "properties": {
                        "argv": {"type": "array", "minItems": 1, "maxItems": l.max_argv_items,
                                 "items": {"type": "string", "maxLength": l.max_arg_bytes}},
                        "timeout_seconds": {"type": "integer", "minimum": 1,
                                            "maximum": l.max_timeout_seconds,
                                            "default": l.default_timeout_seconds}
                    }
                }
            }
        })
    }

    /// Runs one tool call and returns the JSON result for the model (never fails: failures are results).
    ///
    /// `{"task_id","status","exit_code","signal","stdout","stderr","stdout_truncated","stderr_truncated","error"}`
    /// for an ended task; `status` `not_submitted` (with `error`), `wait_timed_out` or `outcome_unknown` (with a
    /// `note`) otherwise.
    pub async fn run(&self, arguments: &str, session_id: &str, turn: u64, call_id: &str) -> Value {
        let args = match parse_args(arguments, &self.limits) {
            Ok(args) => args,
            Err(code) => return json!({"status": "not_submitted", "error": code}),
        };
        let key = idempotency_key(session_id, turn, call_id, &args);
        let body = json!({"argv": args.argv, "timeout_seconds": args.timeout_seconds});
        let submitted = self
            .client
            .post(format!("{}/v1/tasks", self.base))
            .bearer_auth(&self.key)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .header("Idempotency-Key", &key)
            .body(body.to_string())
            .send()
            .await;
        let task = match submitted {
            Err(error) if error.is_connect() => {
                return json!({"status": "not_submitted", "error": "control_plane_unreachable"});
            }
            Err(_) => return unknown(None, "control_plane_unreachable"),
            Ok(response) => match self.read(response).await {
                Read::Ok(task) => task,
                Read::Refused(code) => return json!({"status": "not_submitted", "error": code}),
                Read::Broken(code) => return unknown(None, code),
            },
        };
        let Some(id) = task
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| is_safe_id(id))
            .map(str::to_owned)
        else {
            return unknown(None, "control_plane_bad_response");
        };
        let wait = Duration::from_secs(args.timeout_seconds) + self.limits.wait_grace;
        let deadline = tokio::time::Instant::now() + wait;
        let mut task = task;
        let mut pause = Duration::from_millis(50);
        loop {
            match task.get("status").and_then(Value::as_str) {
                Some("queued" | "running") => {}
                Some("succeeded" | "failed" | "timed_out" | "lost") => {
                    return self.ended(&id, &task);
                }
                _ => return unknown(Some(&id), "control_plane_bad_response"),
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return json!({
                    "task_id": id,
                    "status": "wait_timed_out",
                    "note": format!("the agent stopped waiting after {} s; the task may still be running on the control plane (it was not cancelled)", wait.as_secs()),
                });
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            let polled = self
                .client
                .get(format!("{}/v1/tasks/{id}", self.base))
                .bearer_auth(&self.key)
                .header(reqwest::header::ACCEPT, "application/json")
                .send()
                .await;
            task = match polled {
                Err(_) => return unknown(Some(&id), "control_plane_unreachable"),
                Ok(response) => match self.read(response).await {
                    Read::Ok(task) => task,
                    Read::Refused(code) | Read::Broken(code) => return unknown(Some(&id), code),
                },
            };
        }
    }

    async fn read(&self, mut response: reqwest::Response) -> Read {
        let status = response.status();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > self.limits.max_response_bytes {
                        return Read::Broken("control_plane_bad_response");
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(_) => return Read::Broken("control_plane_unreachable"),
            }
        }
        let value: Option<Value> = serde_json::from_slice(&body).ok();
        if status.is_success() {
            return match value {
                Some(value @ Value::Object(_)) => Read::Ok(value),
                _ => Read::Broken("control_plane_bad_response"),
            };
        }
        eprintln!("awp-agent: control plane answered http {}", status.as_u16());
        let code = value
            .as_ref()
            .and_then(|v| v.pointer("/error/code"))
            .and_then(Value::as_str)
            .filter(|c| is_stable_code(c));
        Read::Refused(match (status.as_u16(), code) {
            (401 | 403, _) => "control_plane_auth_failed",
            (_, Some(code)) => static_code(code),
            _ => "control_plane_http_error",
        })
    }

    fn ended(&self, id: &str, task: &Value) -> Value {
        let max = self.limits.max_output_bytes;
        let text = |name: &str| task.get(name).and_then(Value::as_str).unwrap_or_default();
        let flag = |name: &str| task.get(name).and_then(Value::as_bool).unwrap_or(false);
        let (stdout, stdout_cut) = cut(text("stdout"), max);
        let (stderr, stderr_cut) = cut(text("stderr"), max);
        json!({
            "task_id": id,
            "status": task.get("status"),
            "exit_code": task.get("exit_code").and_then(Value::as_i64),
            "signal": task.get("signal").and_then(Value::as_i64),
            "stdout": stdout,
            "stderr": stderr,
            "stdout_truncated": stdout_cut || flag("stdout_truncated"),
            "stderr_truncated": stderr_cut || flag("stderr_truncated"),
            "error": task.get("error").and_then(Value::as_str).filter(|c| is_stable_code(c)),
        })
    }
}

enum Read {
    Ok(Value),
    /// The control plane answered with an error status: the request was refused.
    Refused(&'static str),
    /// The answer was unusable or cut off.
    Broken(&'static str),
}

fn unknown(id: Option<&str>, error: &str) -> Value {
    json!({
        "task_id": id,
        "status": "outcome_unknown",
        "error": error,
        "note": "the task may have been submitted but the agent lost contact with the control plane; its outcome is unknown",
    })
}

/// Codes the control plane may send back that the agent passes on; anything else becomes
/// `control_plane_http_error` (the agent never copies arbitrary upstream text to the model).
fn static_code(code: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "idempotency_key_conflict",
        "task_queue_full",
        "argv_invalid",
        "argv_too_many_items",
        "argv_too_large",
        "argv_contains_nul",
        "timeout_invalid",
        "body_too_large",
        "host_forbidden",
        "origin_forbidden",
    ];
    KNOWN
        .iter()
        .find(|k| **k == code)
        .copied()
        .unwrap_or("control_plane_http_error")
}

fn is_stable_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn is_safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `text` cut to at most `max` bytes at a character boundary, and whether it was cut.
fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text.get(..end).unwrap_or_default(), true)
}

/// The validated arguments of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskArgs {
    /// The argv.
    pub argv: Vec<String>,
    /// Task timeout and wait, in seconds.
    pub timeout_seconds: u64,
}

/// Parses a tool call's `arguments` (a JSON object text): `{"argv":[…],"timeout_seconds":n}`.
///
/// # Errors
/// `managed_task_arguments_invalid` (not an object, unknown field), `managed_task_argv_invalid`,
/// `managed_task_argv_too_large`, `managed_task_timeout_invalid`.
pub fn parse_args(arguments: &str, limits: &TaskToolLimits) -> Result<TaskArgs, &'static str> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(arguments) else {
        return Err("managed_task_arguments_invalid");
    };
    if object.keys().any(|k| k != "argv" && k != "timeout_seconds") {
        return Err("managed_task_arguments_invalid");
    }
    let invalid = "managed_task_argv_invalid";
    let Some(Value::Array(items)) = object.get("argv") else {
        return Err(invalid);
    };
    if items.is_empty() || items.len() > limits.max_argv_items {
        return Err(invalid);
    }
    let mut argv = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(s) if s.len() <= limits.max_arg_bytes && !s.contains('\0') => {
                argv.push(s.clone());
            }
            _ => return Err(invalid),
        }
    }
    if argv.first().is_none_or(String::is_empty) {
        return Err(invalid);
    }
    if argv.iter().map(String::len).sum::<usize>() > limits.max_argv_bytes {
        return Err("managed_task_argv_too_large");
    }
    let timeout_seconds = match object.get("timeout_seconds") {
        None | Some(Value::Null) => limits.default_timeout_seconds,
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as u64))
            .ok_or("managed_task_timeout_invalid")?,
        Some(_) => return Err("managed_task_timeout_invalid"),
    };
    if !(1..=limits.max_timeout_seconds).contains(&timeout_seconds) {
        return Err("managed_task_timeout_invalid");
    }
    Ok(TaskArgs {
        argv,
        timeout_seconds,
    })
}

/// `awp-agent:` + SHA-256 hex of session id, turn number, tool call id and the canonical arguments: a repeated
/// submission of the same call of the same turn of the same session is the same task at the control plane.
pub fn idempotency_key(session_id: &str, turn: u64, call_id: &str, args: &TaskArgs) -> String {
    let mut hasher = Sha256::new();
    for part in [session_id, &turn.to_string(), call_id] {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hasher.update(json!({"argv": args.argv, "timeout_seconds": args.timeout_seconds}).to_string());
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("awp-agent:{digest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Option<ManagedTasks>, &'static str> {
        ManagedTasks::from_vars(
            |name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            },
            TaskToolLimits::default(),
        )
        .map_err(|e| e.code())
    }

    const KEY: &str = "0123456789abcdef-key";

    #[test]
    fn all_three_variables_enable_the_tool_and_urls_are_checked() {
        let with = |url: &str, extra: &[(&'static str, &'static str)]| {
            let mut vars = vec![
                ("AWP_AGENT_MANAGED_TASKS_OPT_IN", "1"),
                ("AWP_CONTROL_PLANE_URL", url),
                ("AWP_CONTROL_PLANE_API_KEY", KEY),
            ];
            vars.extend_from_slice(extra);
            from(&vars).map(|m| m.map(|m| m.base))
        };
        assert_eq!(
            with("http://127.0.0.1:8100", &[]),
            Ok(Some("http://127.0.0.1:8100".into()))
        );
        assert_eq!(
            with("http://localhost:8100/", &[]),
            Ok(Some("http://localhost:8100".into()))
        );
        assert_eq!(
            with("http://10.0.0.1:8100", &[]),
            Err("control_plane_url_rejected")
        );
        assert_eq!(
            with(
                "http://10.0.0.1:8100",
                &[("AWP_AGENT_REMOTE_API_OPT_IN", "1")]
            ),
            Err("control_plane_url_rejected")
        );
        assert_eq!(
            with("https://cp.example.com", &[]),
            Err("control_plane_remote_not_allowed")
        );
        assert_eq!(
            with(
                "https://cp.example.com",
                &[("AWP_AGENT_REMOTE_API_OPT_IN", "1")]
            ),
            Ok(Some("https://cp.example.com".into()))
        );
        assert_eq!(
            with("http://127.0.0.1:1/v1", &[]),
            Err("control_plane_url_invalid")
        );
        assert_eq!(
            with("http://u:p@127.0.0.1:1", &[]),
            Err("control_plane_url_invalid")
        );
        assert_eq!(
            with("ftp://127.0.0.1", &[]),
            Err("control_plane_url_invalid")
        );
        // Any of the three missing (or a different opt-in value): chat-only.
        let chat_only = |vars: &[(&str, &str)]| assert!(matches!(from(vars), Ok(None)), "{vars:?}");
        chat_only(&[]);
        chat_only(&[
            ("AWP_CONTROL_PLANE_URL", "http://127.0.0.1:1"),
            ("AWP_CONTROL_PLANE_API_KEY", KEY),
        ]);
        chat_only(&[
            ("AWP_AGENT_MANAGED_TASKS_OPT_IN", "1"),
            ("AWP_CONTROL_PLANE_API_KEY", KEY),
        ]);
        chat_only(&[
            ("AWP_AGENT_MANAGED_TASKS_OPT_IN", "1"),
            ("AWP_CONTROL_PLANE_URL", "http://127.0.0.1:1"),
        ]);
        chat_only(&[
            ("AWP_AGENT_MANAGED_TASKS_OPT_IN", "true"),
            ("AWP_CONTROL_PLANE_URL", "http://127.0.0.1:1"),
            ("AWP_CONTROL_PLANE_API_KEY", KEY),
        ]);
        assert_eq!(
            from(&[
                ("AWP_AGENT_MANAGED_TASKS_OPT_IN", "1"),
                ("AWP_CONTROL_PLANE_URL", "http://127.0.0.1:1"),
                ("AWP_CONTROL_PLANE_API_KEY", "short"),
            ])
            .map(|m| m.is_some()),
            Err("control_plane_key_invalid")
        );
        let client = from(&[
            ("AWP_AGENT_MANAGED_TASKS_OPT_IN", "1"),
            ("AWP_CONTROL_PLANE_URL", "http://127.0.0.1:1"),
            ("AWP_CONTROL_PLANE_API_KEY", KEY),
        ])
        .unwrap()
        .unwrap();
        assert!(!format!("{client:?}").contains(KEY));
        assert_eq!(client.tool_definition()["function"]["name"], TOOL_NAME);
    }

    #[test]
    fn arguments_are_bounded() {
        let limits = TaskToolLimits::default();
        let check = |args: Value, expect: Result<u64, &str>| {
            assert_eq!(
                parse_args(&args.to_string(), &limits).map(|a| a.timeout_seconds),
                expect,
                "{args}"
            );
        };
        check(json!({"argv": ["echo"]}), Ok(60));
        check(json!({"argv": ["echo"], "timeout_seconds": 1}), Ok(1));
        check(json!({"argv": ["echo"], "timeout_seconds": 300}), Ok(300));
        check(
            json!({"argv": ["echo"], "timeout_seconds": 301}),
            Err("managed_task_timeout_invalid"),
        );
        check(
            json!({"argv": ["echo"], "timeout_seconds": 0}),
            Err("managed_task_timeout_invalid"),
        );
        check(
            json!({"argv": ["echo"], "timeout_seconds": 2.5}),
            Err("managed_task_timeout_invalid"),
        );
        check(json!({"argv": vec!["a"; 32]}), Ok(60));
        check(
            json!({"argv": vec!["a"; 33]}),
            Err("managed_task_argv_invalid"),
        );
        check(json!({"argv": ["a".repeat(8192)]}), Ok(60));
        check(
            json!({"argv": ["a".repeat(8193)]}),
            Err("managed_task_argv_invalid"),
        );
        check(json!({"argv": vec!["a".repeat(8192); 8]}), Ok(60));
        let mut over_total = vec!["a".repeat(8192); 8];
        over_total.push("b".to_owned());
        check(
            json!({ "argv": over_total }),
            Err("managed_task_argv_too_large"),
        );
        check(json!({"argv": []}), Err("managed_task_argv_invalid"));
        check(json!({"argv": [""]}), Err("managed_task_argv_invalid"));
        check(json!({"argv": "echo hi"}), Err("managed_task_argv_invalid"));
        check(
            json!({"argv": ["echo"], "shell": true}),
            Err("managed_task_arguments_invalid"),
        );
        check(json!(["echo"]), Err("managed_task_arguments_invalid"));
    }

    #[test]
    fn idempotency_keys_depend_on_session_turn_call_and_arguments() {
        let args = TaskArgs {
            argv: vec!["echo".into()],
            timeout_seconds: 60,
        };
        let key = idempotency_key("s", 1, "call_1", &args);
        assert!(key.starts_with("awp-agent:") && key.len() == 10 + 64);
        assert_eq!(key, idempotency_key("s", 1, "call_1", &args));
        assert_ne!(key, idempotency_key("s", 2, "call_1", &args));
        assert_ne!(key, idempotency_key("t", 1, "call_1", &args));
        assert_ne!(key, idempotency_key("s", 1, "call_2", &args));
        let other = TaskArgs {
            timeout_seconds: 61,
            ..args
        };
        assert_ne!(key, idempotency_key("s", 1, "call_1", &other));
    }

    #[test]
    fn output_is_cut_at_a_character_boundary() {
        assert_eq!(cut("abc", 3), ("abc", false));
        assert_eq!(cut("abcd", 3), ("abc", true));
        assert_eq!(cut("aé", 2), ("a", true));
    }
}
