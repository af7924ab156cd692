//! `tools.list` and `tools.call` (ours): the app bundle of `awp-host serve --app DIR` on the local control surface.
//!
//! A call runs exactly as `awp-host tools call` does: [`AppBundle::prepare`] (schema check, secrets, argv) then
//! [`agentwire_cli_driver::Invocation::run`], with the host's environment as the driver's source for
//! `sandbox.env.pass` and secrets. The effect of a call is resolved here from the tool's `mutates:` (the surface
//! cannot see the bundle): `compute` for `mutates: false`, `destructive` for `mutates: true` (human: console
//! approval, agent: denied). A failed call is an envelope error whose `details.code` is the driver's semantic
//! code (`input_invalid`, `auth_required`, `timeout`, …), with `retryable`, `exitCode`, `field` and the
//! truncation flags.
//!
//! Source: issue 9 ("Where the local control plane has landed"); `bins/awp-host/src/tools.rs` for the call path.

use std::collections::BTreeMap;

use agentwire_cli_driver::{AppBundle, CallContext, ErrorCode as ToolCode, Output, ToolError};
use agentwire_local_control::contract::ours::{
    ToolCallParams, ToolCallResult, ToolListResult, ToolOutputFormat, ToolSummary, ToolsCall,
    ToolsList,
};
use agentwire_local_control::envelope::{ErrorBody, ErrorCode};
use agentwire_local_control::server::RequestContext;
use agentwire_local_control::surface::Effect;
use serde_json::{Map, Value, json};

use super::{ControlPlane, error, result};

/// The bounds of calls through the control plane: the driver's defaults except stdout, kept up to 4 MiB (the
/// answer must fit the transport's 16 MiB response bound with JSON escaping), and stderr's last 64 KiB.
pub fn tool_limits() -> agentwire_cli_driver::Limits {
    agentwire_cli_driver::Limits {
        max_stdout_bytes: 4 * 1024 * 1024,
        max_stderr_bytes: 64 * 1024,
        ..agentwire_cli_driver::Limits::default()
    }
}

/// The effect of calling `tool_id`: `Ok(None)` when no such tool is loaded.
pub(crate) fn effect(bundle: Option<&AppBundle>, tool_id: &str) -> Option<Effect> {
    let tool = bundle?.tool(tool_id)?;
    Some(if tool.mutates {
        Effect::Destructive
    } else {
        Effect::Compute
    })
}

/// The `toolId` of `tools.call` params, if it is a string.
pub(crate) fn tool_id(params: &Value) -> Option<&str> {
    params.get("toolId").and_then(Value::as_str)
}

pub(crate) fn list(plane: &ControlPlane) -> Result<Value, ErrorBody> {
    let tools = plane
        .inner
        .app
        .as_deref()
        .map(|bundle| {
            bundle
                .tools()
                .map(|tool| ToolSummary {
                    id: tool.id.clone(),
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    mutates: tool.mutates,
                    input_schema: tool
                        .inputs
                        .clone()
                        .unwrap_or_else(|| Value::Object(Map::new())),
                })
                .collect()
        })
        .unwrap_or_default();
    result::<ToolsList>(&ToolListResult { tools })
}

pub(crate) async fn call(
    plane: &ControlPlane,
    ctx: &RequestContext,
    params: ToolCallParams,
) -> Result<Value, ErrorBody> {
    let Some(bundle) = plane.inner.app.as_deref() else {
        return Err(not_loaded(&params.tool_id));
    };
    let call = CallContext {
        env: plane.inner.tool_env.clone(),
        secrets: BTreeMap::new(),
        // Abandoning the request (disconnect, timeout, shutdown) stops the tool's process group.
        cancel: ctx.cancel.child_token(),
    };
    let invocation = bundle
        .prepare(&params.tool_id, &params.input, &call)
        .map_err(|e| tool_error(&e))?;
    let out = invocation
        .run(&call.cancel)
        .await
        .map_err(|e| tool_error(&e))?;
    let output_format = match out.output {
        Output::Json(_) => ToolOutputFormat::Json,
        Output::Text(_) => ToolOutputFormat::Text,
    };
    result::<ToolsCall>(&ToolCallResult {
        tool_id: params.tool_id,
        output_format,
        output: out.output.to_value(),
        exit_code: out.exit_code,
        stdout_truncated: out.stdout_truncated,
        stderr: out.stderr,
        stderr_truncated: out.stderr_truncated,
    })
}

/// `not_found` for a tool that is not in the loaded bundle (or no bundle is loaded).
pub(crate) fn not_loaded(tool_id: &str) -> ErrorBody {
    let mut details = Map::new();
    details.insert("code".into(), json!(ToolCode::ToolNotFound.as_str()));
    error(
        ErrorCode::NotFound,
        format!(
            "no tool {:?} is loaded",
            crate::store::bounded_line(tool_id, 128)
        ),
    )
    .with_details(details)
}

/// The envelope code for a driver's semantic code.
///
/// | driver code | envelope code |
/// |---|---|
/// | `input_invalid`, `usage_error`, `argv_too_large` | `invalid_request` |
/// | `tool_not_found`, `not_found` | `not_found` |
/// | `rate_limited` | `rate_limited` (retriable) |
/// | `timeout` | `timeout` (retriable) |
/// | `cancelled` | `cancelled` |
/// | `internal` | `internal_error` |
/// | anything else (`auth_required`, `missing_secret`, `upstream_error`, `spawn_failed`, …) | `unavailable` |
pub fn envelope_code(code: ToolCode) -> ErrorCode {
    match code {
        ToolCode::InputInvalid | ToolCode::UsageError | ToolCode::ArgvTooLarge => {
            ErrorCode::InvalidRequest
        }
        ToolCode::ToolNotFound | ToolCode::NotFound => ErrorCode::NotFound,
        ToolCode::RateLimited => ErrorCode::RateLimited,
        ToolCode::Timeout => ErrorCode::Timeout,
        ToolCode::Cancelled => ErrorCode::Cancelled,
        ToolCode::Internal => ErrorCode::InternalError,
        _ => ErrorCode::Unavailable,
    }
}

/// The error envelope of a failed call: the mapped code, the redacted message, the driver's facts in `details`.
fn tool_error(e: &ToolError) -> ErrorBody {
    let mut details = Map::new();
    details.insert("code".into(), json!(e.code.as_str()));
    details.insert("retryable".into(), json!(e.retryable()));
    details.insert("exitCode".into(), json!(e.exit_code));
    details.insert("field".into(), json!(e.field));
    details.insert("stdoutTruncated".into(), json!(e.stdout_truncated));
    details.insert("stderrTruncated".into(), json!(e.stderr_truncated));
    // ToolError texts are redacted when built; bounded to the envelope's message limit.
    error(
        envelope_code(e.code),
        crate::store::bounded_line(&e.to_string(), 1000),
    )
    .retriable(e.retryable())
    .with_details(details)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_driver_code_maps_and_retriable_codes_stay_retriable() {
        for code in ToolCode::ALL {
            let mapped = envelope_code(code);
            if code.retryable() {
                assert!(
                    matches!(mapped, ErrorCode::RateLimited | ErrorCode::Timeout),
                    "{code}"
                );
            }
        }
        assert_eq!(
            envelope_code(ToolCode::AuthRequired),
            ErrorCode::Unavailable
        );
        assert_eq!(
            envelope_code(ToolCode::InputInvalid),
            ErrorCode::InvalidRequest
        );
    }
}
