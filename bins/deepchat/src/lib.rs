//! `deepchat`: a drop-in for DeepChat's bundled CLI, as a thin client of agentwire's local control plane.
//!
//! The flow is command → (method, params) → client → render: [`command`] parses `deepchat <domain> <verb>
//! [options]` into an [`command::Invocation`]; [`run`] validates the params against the DeepChat contract
//! (`agentwire_local_control::contract`), discovers the host's descriptor, calls it with
//! `agentwire_local_control::client::Client`, validates the result and renders it ([`render`] for text,
//! envelopes for `--json`/`--jsonl`). Exit codes: 0 ok, 2 usage, 3 unavailable/version, 4 auth, 5 approval,
//! 6 domain, 7 timeout/cancel, 8 internal/protocol (DeepChat `src/cli/errors.ts`).
//!
//! What it deliberately is not: it holds no credentials beyond the token it presents, decides no policy,
//! resolves no approval, and never writes a path the server names (only `--out`, published without overwrite).

pub mod command;
mod compute;
pub mod io;
mod ocr;
mod providers;
pub mod render;

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use agentwire_local_control::client::{Client, ClientError};
use agentwire_local_control::contract::{
    self, ContractError, Method, artifacts, cli, media, model_config, models, ocr as wire_ocr,
    ours, providers as wire_providers, runs, settings,
};
use agentwire_local_control::descriptor;
use agentwire_local_control::envelope::{
    ErrorBody, ErrorCode, RequestEnvelope, ResponseEnvelope, StreamRecord,
};
use serde_json::Value;
use tokio::sync::Notify;

use crate::command::{Invocation, Operation, OutputMode, Parsed};

/// A failure to report: its protocol code decides the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Protocol error code.
    pub code: ErrorCode,
    /// Message (never holds a token).
    pub message: String,
    /// Whether retrying may succeed.
    pub retriable: bool,
    /// The server's machine-readable details, passed through to `--json`/`--jsonl` envelopes (e.g. an OCR
    /// extraction's `benchmark` facts when the engine is unavailable).
    pub details: Option<serde_json::Map<String, Value>>,
}

impl Failure {
    /// A non-retriable failure.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            retriable: false,
            details: None,
        }
    }

    fn retriable(mut self) -> Self {
        self.retriable = true;
        self
    }

    /// The process exit code (2..=8).
    pub fn exit_code(&self) -> u8 {
        self.code.exit_code()
    }

    fn body(&self) -> ErrorBody {
        let body = ErrorBody::new(self.code, self.message.clone()).retriable(self.retriable);
        match &self.details {
            Some(details) => body.with_details(details.clone()),
            None => body,
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Remote { error, .. } => Failure {
                code: error.code,
                message: error.message,
                retriable: error.retriable,
                details: error.details,
            },
            other => {
                let failure = Failure::new(other.code(), other.to_string());
                if matches!(other.code(), ErrorCode::Unavailable | ErrorCode::Timeout) {
                    failure.retriable()
                } else {
                    failure
                }
            }
        }
    }
}

/// Where the CLI writes.
pub struct Output<'a> {
    /// Standard output: results and machine envelopes.
    pub stdout: &'a mut (dyn Write + Send),
    /// Standard error: text-mode errors.
    pub stderr: &'a mut (dyn Write + Send),
}

impl std::fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Output")
    }
}

fn new_request_id() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        // Without randomness the id only needs to be unique per connection, which one request per process is.
        return format!("cli-{}", std::process::id());
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("cli-{hex}")
}

/// Runs one CLI invocation and returns the exit code.
///
/// `argv` excludes the program name; `env` looks up environment variables; `stdin` is read only for `--stdin`;
/// `interrupt` resolves on the first SIGINT/SIGTERM, which abandons the request (its connection is closed, which
/// the server treats as cancellation) and exits 7 with `cancelled`.
pub async fn run(
    argv: &[String],
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    stdin: &mut (dyn tokio::io::AsyncRead + Unpin + Send),
    out: Output<'_>,
    interrupt: impl Future<Output = ()>,
) -> u8 {
    let request_id = new_request_id();
    let (invocation, mode, timeout) = match command::parse(argv, env) {
        Ok(Parsed::Help(text)) => {
            return match writeln!(out.stdout, "{}", text.trim_end())
                .and_then(|()| out.stdout.flush())
            {
                Ok(()) => 0,
                Err(e) => write_failed(&e, out.stderr),
            };
        }
        Ok(Parsed::Call {
            invocation,
            mode,
            timeout,
        }) => (invocation, mode, timeout),
        Err(usage) => {
            let failure = Failure::new(ErrorCode::InvalidRequest, usage.message);
            return report_failure(usage.mode, &request_id, &failure, out, true);
        }
    };
    let outcome = {
        let call = execute(
            &invocation,
            mode,
            timeout,
            env,
            stdin,
            &request_id,
            &mut *out.stdout,
        );
        tokio::select! {
            outcome = call => outcome,
            () = interrupt => Err(Failure::new(ErrorCode::Cancelled, "CLI request was interrupted")),
            () = tokio::time::sleep(timeout) => {
                Err(Failure::new(ErrorCode::Timeout, "CLI request timed out").retriable())
            }
        }
    };
    match outcome {
        Ok(Success { result, saved_to }) => {
            let written = match mode {
                OutputMode::Text => {
                    let mut text = render::result(invocation.method, &result);
                    if let Some(path) = saved_to {
                        text.push_str(&render::sanitize(&format!("Saved to {}\n", path.display())));
                    }
                    out.stdout.write_all(text.as_bytes())
                }
                OutputMode::Json | OutputMode::Jsonl => {
                    write_envelope(out.stdout, &ResponseEnvelope::success(&request_id, result))
                }
            };
            match written.and_then(|()| out.stdout.flush()) {
                Ok(()) => 0,
                Err(e) => write_failed(&e, out.stderr),
            }
        }
        Err(failure) => report_failure(mode, &request_id, &failure, out, false),
    }
}

/// Exit status when the reader of standard output went away (`EPIPE`): 128 + SIGPIPE, what a shell reports for
/// a program the signal ended, with nothing printed (as `cat`, `head`'s writers and other CLIs end).
pub const EXIT_OUTPUT_CLOSED: u8 = 141;

/// Message of the internal [`Failure`] standing for a closed standard output (never printed).
const OUTPUT_CLOSED: &str = "standard output was closed";

/// The failure for an output write error: a closed pipe ends quietly ([`EXIT_OUTPUT_CLOSED`]); any other error
/// (e.g. `ENOSPC`) is `internal_error` with one line on stderr.
pub(crate) fn output_failure(e: &std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::new(ErrorCode::InternalError, OUTPUT_CLOSED)
    } else {
        Failure::new(
            ErrorCode::InternalError,
            format!("cannot write the output: {e}"),
        )
    }
}

/// The exit status after a final write failed: quiet [`EXIT_OUTPUT_CLOSED`] for a closed pipe, else one line on
/// stderr and `internal_error`'s exit.
fn write_failed(e: &std::io::Error, stderr: &mut (dyn Write + Send)) -> u8 {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return EXIT_OUTPUT_CLOSED;
    }
    let _ = writeln!(stderr, "internal_error: cannot write the output: {e}");
    let _ = stderr.flush();
    ErrorCode::InternalError.exit_code()
}

fn write_envelope(
    out: &mut (dyn Write + Send),
    envelope: &ResponseEnvelope,
) -> std::io::Result<()> {
    let line = serde_json::to_string(envelope).map_err(std::io::Error::other)?;
    writeln!(out, "{line}")
}

fn report_failure(
    mode: OutputMode,
    request_id: &str,
    failure: &Failure,
    out: Output<'_>,
    usage: bool,
) -> u8 {
    if failure.code == ErrorCode::InternalError && failure.message == OUTPUT_CLOSED {
        return EXIT_OUTPUT_CLOSED;
    }
    let written = match mode {
        OutputMode::Text => {
            let mut text = render::sanitize(&format!("{}: {}\n", failure.code, failure.message));
            if usage {
                text.push_str("Run: deepchat help\n");
            }
            out.stderr
                .write_all(text.as_bytes())
                .and_then(|()| out.stderr.flush())
        }
        OutputMode::Json | OutputMode::Jsonl => {
            let envelope = ResponseEnvelope::failure(request_id, failure.body());
            write_envelope(out.stdout, &envelope).and_then(|()| out.stdout.flush())
        }
    };
    match written {
        Ok(()) => failure.exit_code(),
        Err(e) => write_failed(&e, out.stderr),
    }
}

struct Success {
    result: Value,
    saved_to: Option<std::path::PathBuf>,
}

fn round_trip_params<M: Method>(params: Value) -> Result<Value, ContractError> {
    let typed = contract::decode_params::<M>(params)?;
    serde_json::to_value(typed).map_err(|e| ContractError::Shape {
        detail: e.to_string(),
    })
}

fn round_trip_result<M: Method>(result: Value) -> Result<Value, ContractError> {
    let typed = contract::decode_result::<M>(result)?;
    serde_json::to_value(typed).map_err(|e| ContractError::Shape {
        detail: e.to_string(),
    })
}

macro_rules! by_method {
    ($method:expr, $f:ident, $value:expr) => {
        match $method {
            "cli.status" => $f::<cli::Status>($value),
            "cli.version" => $f::<cli::Version>($value),
            "cli.capabilities" => $f::<cli::Capabilities>($value),
            "cli.doctor" => $f::<cli::Doctor>($value),
            "sessions.runDetached" => $f::<runs::RunDetached>($value),
            "runs.get" => $f::<runs::Get>($value),
            "runs.cancel" => $f::<runs::Cancel>($value),
            "events.subscribe" => $f::<runs::Subscribe>($value),
            "artifacts.describe" => $f::<artifacts::Describe>($value),
            "artifacts.delete" => $f::<artifacts::Delete>($value),
            "settings.getPublic" => $f::<settings::GetPublic>($value),
            "settings.updatePublic" => $f::<settings::UpdatePublic>($value),
            "threads.list" => $f::<ours::ThreadsList>($value),
            "threads.get" => $f::<ours::ThreadsGet>($value),
            "approvals.listPending" => $f::<ours::ApprovalsListPending>($value),
            "models.listPublic" => $f::<models::ListPublic>($value),
            "models.getCapabilities" => $f::<models::GetCapabilities>($value),
            "models.invoke" => $f::<models::Invoke>($value),
            "images.generate" => $f::<media::ImagesGenerate>($value),
            "videos.generate" => $f::<media::VideosGenerate>($value),
            "speech.generate" => $f::<media::SpeechGenerate>($value),
            "audio.transcribeUpload" => $f::<media::TranscribeUpload>($value),
            "audio.transcribeArtifact" => $f::<media::TranscribeArtifact>($value),
            "providers.listPublic" => $f::<wire_providers::ListPublic>($value),
            "providers.testPublicConnection" => $f::<wire_providers::TestPublicConnection>($value),
            "providers.addPublic" => $f::<wire_providers::AddPublic>($value),
            "providers.updatePublic" => $f::<wire_providers::UpdatePublic>($value),
            "providers.remove" => $f::<wire_providers::Remove>($value),
            "providers.setCredential" => $f::<wire_providers::SetCredential>($value),
            "models.listRuntime" => $f::<model_config::ListRuntime>($value),
            "models.setStatus" => $f::<model_config::SetStatus>($value),
            "models.getPublicConfig" => $f::<model_config::GetPublicConfig>($value),
            "models.setPublicConfig" => $f::<model_config::SetPublicConfig>($value),
            "models.resetConfig" => $f::<model_config::ResetConfig>($value),
            "ocr.getRuntimeStatus" => $f::<wire_ocr::GetRuntimeStatus>($value),
            "ocr.clearCache" => $f::<wire_ocr::ClearCache>($value),
            "ocr.extractUpload" => $f::<wire_ocr::ExtractUpload>($value),
            "ocr.extractArtifact" => $f::<wire_ocr::ExtractArtifact>($value),
            _ => Err(ContractError::Shape {
                detail: "no contract for this method".to_owned(),
            }),
        }
    };
}

/// Validates `params` against `method`'s DeepChat contract and returns their canonical JSON (trimmed, unknown
/// keys of plain objects dropped).
///
/// # Errors
/// The contract violation.
pub fn canonical_params(method: &str, params: Value) -> Result<Value, ContractError> {
    by_method!(method, round_trip_params, params)
}

/// Validates a server `result` against `method`'s contract (DeepChat's `contract.output.safeParse`) and returns
/// its canonical JSON.
///
/// # Errors
/// The contract violation.
pub fn canonical_result(method: &str, result: Value) -> Result<Value, ContractError> {
    by_method!(method, round_trip_result, result)
}

async fn execute(
    invocation: &Invocation,
    mode: OutputMode,
    timeout: Duration,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
    stdin: &mut (dyn tokio::io::AsyncRead + Unpin + Send),
    request_id: &str,
    stdout: &mut (dyn Write + Send),
) -> Result<Success, Failure> {
    let mut params = invocation.params.clone();
    if let Some(field) = invocation.stdin_field {
        let value = match command::StdinFormat::of(invocation.method) {
            command::StdinFormat::Text => {
                Value::String(io::read_bounded(stdin, io::MAX_STDIN_BYTES).await?)
            }
            command::StdinFormat::Credential => {
                let text = io::read_bounded(stdin, io::MAX_CREDENTIAL_STDIN_BYTES).await?;
                let key = text
                    .strip_suffix("\r\n")
                    .or_else(|| text.strip_suffix('\n'))
                    .unwrap_or(&text);
                Value::String(key.to_owned())
            }
            command::StdinFormat::JsonObject => {
                let text = io::read_bounded(stdin, io::MAX_STDIN_BYTES).await?;
                match serde_json::from_str::<Value>(&text) {
                    Ok(object @ Value::Object(_)) => object,
                    Ok(_) => {
                        return Err(Failure::new(
                            ErrorCode::InvalidRequest,
                            "stdin must be a JSON object",
                        ));
                    }
                    Err(_) => {
                        return Err(Failure::new(
                            ErrorCode::InvalidRequest,
                            "stdin must be valid JSON",
                        ));
                    }
                }
            }
        };
        if let Value::Object(map) = &mut params {
            map.insert(field.to_owned(), value);
        }
    }
    let params = compute::finish_params(invocation.method, params);
    let params = canonical_params(invocation.method, params).map_err(|e| {
        Failure::new(
            ErrorCode::InvalidRequest,
            format!("CLI input does not match the command contract: {e}"),
        )
    })?;
    let download = match &invocation.operation {
        Operation::Download { out, overwrite } => {
            if io::is_agent_caller(env) {
                return Err(Failure::new(
                    ErrorCode::PermissionDenied,
                    "agent callers cannot download artifact bytes or use --out",
                ));
            }
            Some((out.clone(), *overwrite))
        }
        _ => None,
    };
    let data_dir = io::data_dir(env)?;
    let descriptor = descriptor::discover(&data_dir).map_err(|e| {
        let failure = Failure::new(e.code(), e.to_string());
        if e.code() == ErrorCode::Unavailable {
            failure.retriable()
        } else {
            failure
        }
    })?;
    let token = io::select_token(&descriptor, env)?;
    let client = Client::from_descriptor(&descriptor, token)?;
    let envelope = RequestEnvelope::new(request_id, invocation.method, params);
    let (raw, saved_to) = match (&invocation.operation, download) {
        (Operation::Stream, _) => {
            let run_id = envelope.params["runId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (
                stream(&client, &envelope, timeout, mode, &run_id, stdout).await?,
                None,
            )
        }
        (Operation::ComputeStream, _) => (
            compute::stream(&client, &envelope, timeout, mode, stdout).await?,
            None,
        ),
        (_, Some((out, overwrite))) => {
            let (temp, file) = io::TempOutput::beside(&out, overwrite)?;
            let described = client.rpc(&envelope, timeout).await?;
            let described = canonical_result(invocation.method, described).map_err(bad_result)?;
            let id = described["artifact"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let mut file = tokio::fs::File::from_std(file);
            client.download(&id, &mut file, timeout).await?;
            file.sync_all().await.map_err(|e| {
                Failure::new(ErrorCode::InternalError, format!("cannot sync --out: {e}"))
            })?;
            drop(file);
            temp.publish(&out, overwrite)?;
            (described, Some(out))
        }
        (Operation::Upload { path, max_bytes }, _) => (
            client.upload(&envelope, path, *max_bytes, timeout).await?,
            None,
        ),
        _ => (client.rpc(&envelope, timeout).await?, None),
    };
    let result = canonical_result(invocation.method, raw).map_err(bad_result)?;
    Ok(Success { result, saved_to })
}

fn bad_result(error: ContractError) -> Failure {
    Failure::new(
        ErrorCode::InternalError,
        format!("the host's result did not match the command contract: {error}"),
    )
}

/// Checks `events.subscribe` records as DeepChat's CLI does: targeted at our run, carrying a cursor, a known
/// event whose payload matches its contract (unknown keys dropped), `runs.*` payloads naming our run, and a
/// snapshot's cursor equal to its record's.
fn check_record(record: &StreamRecord, run_id: &str) -> Result<runs::RunEvent, Failure> {
    let internal = |m: &str| Failure::new(ErrorCode::InternalError, m);
    if record.run_id.as_deref() != Some(run_id) || record.cursor.is_none() {
        return Err(internal("the host emitted an event for another run"));
    }
    let event = runs::RunEvent::decode(&record.event, record.data.clone())
        .map_err(|_| internal("the host emitted an invalid stream event"))?;
    if event.run_id().is_some_and(|id| id != run_id) {
        return Err(internal("the host emitted an event for another run"));
    }
    if let runs::RunEvent::Snapshot(snapshot) = &event
        && record.cursor.as_ref().map(|c| c.as_str()) != Some(snapshot.cursor.as_str())
    {
        return Err(internal("the host emitted a snapshot for another cursor"));
    }
    Ok(event)
}

async fn stream(
    client: &Client,
    envelope: &RequestEnvelope,
    timeout: Duration,
    mode: OutputMode,
    run_id: &str,
    stdout: &mut (dyn Write + Send),
) -> Result<Value, Failure> {
    let abort = Arc::new(Notify::new());
    let mut failed: Option<Failure> = None;
    let outcome = {
        let abort_signal = Arc::clone(&abort);
        let failed = &mut failed;
        let on_record = move |record: StreamRecord| {
            if failed.is_some() {
                return;
            }
            let line = check_record(&record, run_id).and_then(|event| match mode {
                OutputMode::Jsonl => {
                    let mut canonical = record;
                    canonical.data = event.data();
                    serde_json::to_string(&canonical)
                        .map(Some)
                        .map_err(|e| Failure::new(ErrorCode::InternalError, e.to_string()))
                }
                OutputMode::Text => Ok(render::event(&event)),
                OutputMode::Json => Ok(None),
            });
            let written = match line {
                Ok(Some(line)) => writeln!(stdout, "{line}")
                    .and_then(|()| stdout.flush())
                    .map_err(|e| output_failure(&e)),
                Ok(None) => Ok(()),
                Err(failure) => Err(failure),
            };
            if let Err(failure) = written {
                *failed = Some(failure);
                abort_signal.notify_one();
            }
        };
        tokio::select! {
            outcome = client.stream(envelope, timeout, on_record) => outcome.map_err(Failure::from),
            () = abort.notified() => Err(Failure::new(ErrorCode::InternalError, "stream aborted")),
        }
    };
    if let Some(failure) = failed {
        return Err(failure);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exit_codes_follow_deepchat() {
        for (code, exit) in [
            (ErrorCode::InvalidRequest, 2),
            (ErrorCode::UnsupportedVersion, 3),
            (ErrorCode::Unavailable, 3),
            (ErrorCode::AuthenticationFailed, 4),
            (ErrorCode::PermissionDenied, 4),
            (ErrorCode::ApprovalDenied, 5),
            (ErrorCode::ApprovalTimeout, 5),
            (ErrorCode::NotFound, 6),
            (ErrorCode::Conflict, 6),
            (ErrorCode::RateLimited, 6),
            (ErrorCode::BodyTooLarge, 6),
            (ErrorCode::ResultTooLarge, 6),
            (ErrorCode::Cancelled, 7),
            (ErrorCode::Timeout, 7),
            (ErrorCode::InternalError, 8),
        ] {
            assert_eq!(Failure::new(code, "x").exit_code(), exit, "{code}");
        }
    }

    #[test]
    fn params_are_checked_against_the_contract() {
        assert!(canonical_params("cli.status", json!({})).is_ok());
        assert!(canonical_params("sessions.runDetached", json!({"prompt":"   "})).is_err());
        assert_eq!(
            canonical_params(
                "sessions.runDetached",
                json!({"prompt":"x","agentId":" a "})
            )
            .unwrap(),
            json!({"prompt":"x","agentId":"a"})
        );
        assert!(
            canonical_params(
                "settings.updatePublic",
                json!({"changes":[{"key":"fontSizeLevel","value":9}]})
            )
            .is_err()
        );
        assert!(canonical_params("nope.method", json!({})).is_err());
    }

    #[test]
    fn results_drop_unknown_keys_of_plain_objects_and_refuse_them_in_strict_ones() {
        let status = json!({"running":true,"pid":1,"startedAt":1,"uptimeMs":1,"endpointKind":"unix",
                            "activeConnections":0,"pendingRequests":0,"extra":"x"});
        let canonical = canonical_result("cli.status", status).unwrap();
        assert!(canonical.get("extra").is_none());
        let cancel = json!({"runId":"r","cancelRequested":true,"status":"idle","extra":1});
        assert!(canonical_result("runs.cancel", cancel).is_err());
    }

    fn record(value: Value) -> StreamRecord {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn stream_records_must_target_our_run() {
        let base = json!({"protocolVersion":1,"surfaceVersion":2,"sequence":0,"timestamp":1,
                          "requestId":"cli-1","runId":"run-1","cursor":"e:1",
                          "event":"sessions.status.changed",
                          "data":{"sessionId":"run-1","status":"idle","version":2,"internalSecret":"x"}});
        let ok = check_record(&record(base.clone()), "run-1").unwrap();
        assert_eq!(
            ok.data(),
            json!({"sessionId":"run-1","status":"idle","version":2})
        );
        assert!(check_record(&record(base.clone()), "run-2").is_err());
        let mut no_cursor = base.clone();
        no_cursor.as_object_mut().unwrap().remove("cursor");
        assert!(check_record(&record(no_cursor), "run-1").is_err());
        let mut internal = base.clone();
        internal["event"] = json!("approvals.closed");
        assert!(check_record(&record(internal), "run-1").is_err());
        let mut foreign = base;
        foreign["event"] = json!("runs.cancel.requested");
        foreign["data"] = json!({"runId":"other","sessionId":"s","requestedAt":1});
        assert_eq!(
            check_record(&record(foreign), "run-1").unwrap_err().code,
            ErrorCode::InternalError
        );
    }
}
