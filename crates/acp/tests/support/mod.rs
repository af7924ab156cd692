//! Test support: the official ACP schema as a validator, a validating tap between a client and an agent, and the
//! fixture agents (in memory and as real processes).
#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agentwire_acp::{AgentSide, Client, ClientBuilder};
use agentwire_fixture_agents::acp_fixture::{FixtureAgent, Mode};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

/// A generous bound for waits in tests: never reached unless something is broken.
pub const WAIT: Duration = Duration::from_secs(30);

/// Awaits `future` for at most [`WAIT`].
pub async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .expect("timed out waiting")
}

/// The official schema, `fixtures/recordings/acp-schema-v1.json`.
pub fn schema_root() -> &'static Value {
    static ROOT: OnceLock<Value> = OnceLock::new();
    ROOT.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/recordings/acp-schema-v1.json"
        );
        let text = std::fs::read_to_string(path).expect("schema copy in fixtures/recordings");
        serde_json::from_str(&text).expect("schema is JSON")
    })
}

/// Validates `value` against `$defs/<name>` of the official schema; `Err` lists the violations.
pub fn validate_def(name: &str, value: &Value) -> Result<(), String> {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> =
        OnceLock::new();
    let validators = VALIDATORS.get_or_init(|| Mutex::new(HashMap::new()));
    let validator = {
        let mut validators = validators.lock().expect("tap lock");
        validators
            .entry(name.to_owned())
            .or_insert_with(|| {
                let root = schema_root();
                assert!(
                    root["$defs"].get(name).is_some(),
                    "no $defs/{name} in the schema"
                );
                let schema = serde_json::json!({
                    "$schema": root["$schema"],
                    "$defs": root["$defs"],
                    "$ref": format!("#/$defs/{name}"),
                });
                Arc::new(jsonschema::validator_for(&schema).expect("schema compiles offline"))
            })
            .clone()
    };
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|error| format!("{} at {}", error, error.instance_path))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Which role wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Agent,
}

/// The `$defs` entry of a method's params and of its result, by who sends the request.
fn method_defs(side: Side, method: &str) -> Option<(&'static str, Option<&'static str>)> {
    Some(match (side, method) {
        (Side::Client, "initialize") => ("InitializeRequest", Some("InitializeResponse")),
        (Side::Client, "authenticate") => ("AuthenticateRequest", Some("AuthenticateResponse")),
        (Side::Client, "session/new") => ("NewSessionRequest", Some("NewSessionResponse")),
        (Side::Client, "session/load") => ("LoadSessionRequest", Some("LoadSessionResponse")),
        (Side::Client, "session/prompt") => ("PromptRequest", Some("PromptResponse")),
        (Side::Client, "session/set_mode") => {
            ("SetSessionModeRequest", Some("SetSessionModeResponse"))
        }
        (Side::Client, "session/cancel") => ("CancelNotification", None),
        (Side::Client, "logout") => ("LogoutRequest", Some("LogoutResponse")),
        (Side::Client, "session/list") => ("ListSessionsRequest", Some("ListSessionsResponse")),
        (Side::Client, "session/resume") => ("ResumeSessionRequest", Some("ResumeSessionResponse")),
        (Side::Client, "session/close") => ("CloseSessionRequest", Some("CloseSessionResponse")),
        (Side::Client, "session/delete") => ("DeleteSessionRequest", Some("DeleteSessionResponse")),
        (Side::Client, "session/set_config_option") => (
            "SetSessionConfigOptionRequest",
            Some("SetSessionConfigOptionResponse"),
        ),
        (Side::Agent, "elicitation/create") => (
            "CreateElicitationRequest",
            Some("CreateElicitationResponse"),
        ),
        (Side::Agent, "elicitation/complete") => ("CompleteElicitationNotification", None),
        (_, "$/cancel_request") => ("CancelRequestNotification", None),
        (Side::Agent, "session/update") => ("SessionNotification", None),
        (Side::Agent, "session/request_permission") => (
            "RequestPermissionRequest",
            Some("RequestPermissionResponse"),
        ),
        (Side::Agent, "fs/read_text_file") => ("ReadTextFileRequest", Some("ReadTextFileResponse")),
        (Side::Agent, "fs/write_text_file") => {
            ("WriteTextFileRequest", Some("WriteTextFileResponse"))
        }
        (Side::Agent, "terminal/create") => {
            ("CreateTerminalRequest", Some("CreateTerminalResponse"))
        }
        (Side::Agent, "terminal/output") => {
            ("TerminalOutputRequest", Some("TerminalOutputResponse"))
        }
        (Side::Agent, "terminal/wait_for_exit") => (
            "WaitForTerminalExitRequest",
            Some("WaitForTerminalExitResponse"),
        ),
        (Side::Agent, "terminal/kill") => ("KillTerminalRequest", Some("KillTerminalResponse")),
        (Side::Agent, "terminal/release") => {
            ("ReleaseTerminalRequest", Some("ReleaseTerminalResponse"))
        }
        _ => return None,
    })
}

/// What a tap saw: messages validated per side, and violations (schema errors, non-JSON lines).
#[derive(Debug, Default)]
pub struct TapLog {
    pub validated: HashMap<&'static str, usize>,
    pub client_violations: Vec<String>,
    pub agent_violations: Vec<String>,
    pub client_methods: Vec<String>,
    pub agent_methods: Vec<String>,
    /// Error codes of the agent's error responses, in order.
    pub agent_error_codes: Vec<i64>,
    /// Requests in flight by (sender, id) → method, to pick the result's `$defs` entry.
    pending: HashMap<(bool, String), String>,
}

/// A validating relay between a client and an agent. Lines are forwarded verbatim.
#[derive(Clone, Debug, Default)]
pub struct Tap {
    pub log: Arc<Mutex<TapLog>>,
}

impl Tap {
    fn check_line(&self, side: Side, line: &[u8]) {
        let mut log = self.log.lock().expect("tap lock");
        let text = String::from_utf8_lossy(line);
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        let violation = match serde_json::from_str::<Value>(trimmed) {
            Err(_) => Some(format!(
                "non-JSON line: {}",
                trimmed.chars().take(80).collect::<String>()
            )),
            Ok(message) => Tap::check_message(&mut log, side, &message).err(),
        };
        if let Some(violation) = violation {
            match side {
                Side::Client => log.client_violations.push(violation),
                Side::Agent => log.agent_violations.push(violation),
            }
        }
    }

    fn check_message(log: &mut TapLog, side: Side, message: &Value) -> Result<(), String> {
        let (request_def, notification_def, response_def) = match side {
            Side::Client => ("ClientRequest", "ClientNotification", "ClientResponse"),
            Side::Agent => ("AgentRequest", "AgentNotification", "AgentResponse"),
        };
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").map(Value::to_string);
        let envelope = match (method, &id) {
            (Some(_), Some(_)) => request_def,
            (Some(_), None) => notification_def,
            (None, _) => response_def,
        };
        if message.get("jsonrpc") != Some(&Value::String("2.0".into())) {
            return Err(format!("missing jsonrpc 2.0: {message}"));
        }
        validate_def(envelope, message).map_err(|e| format!("{envelope}: {e}"))?;
        *log.validated.entry(envelope).or_default() += 1;
        let is_client = side == Side::Client;
        match (method, id) {
            (Some(method), id) => {
                match side {
                    Side::Client => log.client_methods.push(method.to_owned()),
                    Side::Agent => log.agent_methods.push(method.to_owned()),
                }
                let Some((params_def, _)) = method_defs(side, method) else {
                    return Err(format!("{side:?} sent unexpected method {method}"));
                };
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                validate_def(params_def, &params).map_err(|e| format!("{params_def}: {e}"))?;
                if let Some(id) = id {
                    log.pending.insert((is_client, id), method.to_owned());
                }
            }
            (None, Some(id)) => {
                // A response: its request was sent by the other side.
                let Some(method) = log.pending.remove(&(!is_client, id)) else {
                    return Ok(()); // an answer to an unknown id (a misbehaving peer's duplicate): envelope only
                };
                let requester = if is_client { Side::Agent } else { Side::Client };
                if let Some(error) = message.get("error") {
                    validate_def("Error", error).map_err(|e| format!("Error: {e}"))?;
                    if side == Side::Agent
                        && let Some(code) = error.get("code").and_then(Value::as_i64)
                    {
                        log.agent_error_codes.push(code);
                    }
                } else if let Some((_, Some(result_def))) = method_defs(requester, &method) {
                    let result = message.get("result").cloned().unwrap_or(Value::Null);
                    validate_def(result_def, &result).map_err(|e| format!("{result_def}: {e}"))?;
                }
            }
            (None, None) => return Err(format!("neither method nor id: {message}")),
        }
        Ok(())
    }

    /// Checks one recorded message (a line without its newline) as written by `side`, as if it had passed the tap.
    pub fn check_recorded(&self, side: Side, line: &str) {
        self.check_line(side, line.as_bytes());
    }

    /// Panics unless the client side (and, with `agent_too`, the agent side) emitted only schema-valid messages,
    /// and at least one message was validated.
    pub fn assert_clean(&self, agent_too: bool) {
        let log = self.log.lock().expect("tap lock");
        assert!(
            log.client_violations.is_empty(),
            "client emitted invalid messages: {:#?}",
            log.client_violations
        );
        if agent_too {
            assert!(
                log.agent_violations.is_empty(),
                "agent emitted invalid messages: {:#?}",
                log.agent_violations
            );
        }
        assert!(!log.validated.is_empty(), "nothing was validated");
    }

    /// Relays `from` → `to`, checking each line as written by `side`.
    pub fn relay<R, W>(&self, side: Side, from: R, mut to: W)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let tap = self.clone();
        tokio::spawn(async move {
            let mut from = BufReader::with_capacity(1 << 20, from);
            let mut line = Vec::new();
            loop {
                line.clear();
                match from.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        tap.check_line(side, &line);
                        if to.write_all(&line).await.is_err() || to.flush().await.is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = to.shutdown().await;
        });
    }
}

/// A client and an in-memory fixture agent (the agent role) joined through a validating tap.
pub fn memory_pair(mode: Mode, builder: ClientBuilder) -> (Client, Tap) {
    memory_pair_with(FixtureAgent::new(mode), builder)
}

/// A client and any in-memory agent joined through a validating tap.
pub fn memory_pair_with<A: agentwire_acp::Agent>(
    agent: A,
    builder: ClientBuilder,
) -> (Client, Tap) {
    let tap = Tap::default();
    let (client_out, tap_from_client) = tokio::io::duplex(1 << 16);
    let (tap_to_agent, agent_in) = tokio::io::duplex(1 << 16);
    let (agent_out, tap_from_agent) = tokio::io::duplex(1 << 16);
    let (tap_to_client, client_in) = tokio::io::duplex(1 << 16);
    tap.relay(Side::Client, tap_from_client, tap_to_agent);
    tap.relay(Side::Agent, tap_from_agent, tap_to_client);
    let agent = AgentSide::new(
        agent,
        agent_in,
        agent_out,
        agentwire_jsonrpc::Config::default(),
    );
    tokio::spawn(agent.run());
    (builder.connect(client_in, client_out), tap)
}

/// The `acp-fixture` binary.
pub fn fixture_command(mode: &str) -> agentwire_process::Command {
    let mut command = agentwire_process::Command::new(agentwire_testkit::bin_path("acp-fixture"));
    command.arg("--mode").arg(mode).inherit_os_env();
    command
}
