//! The client's turn decisions, as pure functions: what a `session/prompt` answer means given the cancel flag.
//!
//! Source: ACP v1 "Prompt Turn" → "Cancellation"; protocols/acp.md ("Cancellation"): the client trusts its own cancel
//! flag, so an answer after `session/cancel` is reported as `cancelled` whatever it says (an error, `end_turn`, …).

use agent_client_protocol_schema::v1::{PromptResponse, StopReason};
use agentwire_jsonrpc::CallError;
use serde_json::Value;

use crate::error::AcpError;

/// The method name of a prompt turn.
pub(crate) const PROMPT: &str = "session/prompt";

/// The outcome of an ACP v1 turn from the agent's answer to `session/prompt` and whether the client cancelled it.
///
/// # Errors
///
/// When not cancelled: [`AcpError::Rpc`] for an error answer, [`AcpError::InvalidResponse`] for an answer without a
/// valid `stopReason`, [`AcpError::ConnectionClosed`] when the agent went away.
pub fn prompt_outcome(
    cancelled: bool,
    answer: Result<Value, CallError>,
) -> Result<StopReason, AcpError> {
    if cancelled {
        return Ok(StopReason::Cancelled);
    }
    let value = answer.map_err(|error| AcpError::from_call(PROMPT, error))?;
    let response: PromptResponse =
        serde_json::from_value(value).map_err(|error| AcpError::invalid_response(PROMPT, error))?;
    Ok(response.stop_reason)
}

/// The outcome of a Kandev-dialect turn from the `accepted` answer (`{"accepted":true}`): `None` while the turn goes
/// on (its end arrives as a `complete`/`error` update), `Some(outcome)` when it already ended.
pub fn kandev_accept_outcome(
    cancelled: bool,
    answer: Result<Value, CallError>,
) -> Option<Result<StopReason, AcpError>> {
    if cancelled {
        return Some(Ok(StopReason::Cancelled));
    }
    match answer {
        Ok(value) if value.get("accepted").and_then(Value::as_bool) == Some(false) => {
            Some(Err(AcpError::TurnFailed {
                message: "agent did not accept the prompt".to_owned(),
            }))
        }
        Ok(_) => None,
        Err(error) => Some(Err(AcpError::from_call(PROMPT, error))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_jsonrpc::ErrorObject;
    use serde_json::json;

    fn check(cancelled: bool, answer: Result<Value, CallError>, expect: &str) {
        let got = match prompt_outcome(cancelled, answer) {
            Ok(reason) => format!("{reason:?}"),
            Err(error) => error.code().to_owned(),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn cancel_flag_wins_over_any_answer() {
        check(true, Ok(json!({"stopReason": "end_turn"})), "Cancelled");
        check(
            true,
            Err(CallError::Rpc(ErrorObject::internal_error("interrupted"))),
            "Cancelled",
        );
        check(true, Err(CallError::ConnectionClosed), "Cancelled");
        check(true, Ok(json!({"stopReason": "cancelled"})), "Cancelled");
    }

    #[test]
    fn answers_without_cancel() {
        check(false, Ok(json!({"stopReason": "end_turn"})), "EndTurn");
        check(false, Ok(json!({"stopReason": "max_tokens"})), "MaxTokens");
        check(false, Ok(json!({"stopReason": "refusal"})), "Refusal");
        check(false, Ok(json!({"stopReason": "cancelled"})), "Cancelled");
        check(false, Ok(json!({})), "invalid_response");
        check(
            false,
            Ok(json!({"stopReason": "bored"})),
            "invalid_response",
        );
        check(
            false,
            Err(CallError::Rpc(ErrorObject::internal_error("x"))),
            "rpc_error",
        );
        check(false, Err(CallError::ConnectionClosed), "connection_closed");
    }

    #[test]
    fn kandev_accept() {
        assert!(kandev_accept_outcome(false, Ok(json!({"accepted": true}))).is_none());
        let refused = kandev_accept_outcome(false, Ok(json!({"accepted": false})));
        assert_eq!(
            refused.and_then(Result::err).map(|e| e.code()),
            Some("turn_failed")
        );
        let cancelled = kandev_accept_outcome(true, Err(CallError::ConnectionClosed));
        assert!(matches!(cancelled, Some(Ok(StopReason::Cancelled))));
    }
}
