//! `ToolPermissions`: the tool-permission adapter (model pre-check, then one approved execution), deduplicated
//! by an explicit key while pending.
//!
//! Checked against DeepChat's `src/main/tool/permission/toolPermissionBroker.ts` (the version built on
//! `ApprovalBroker`: `evaluateModel`, `authorizeExecution`, `cancelConversation`, `deduplicatePending: true`,
//! scope `tool:<conversationId>`).

use std::fmt;

use serde_json::Value;

use crate::error::ApprovalError;
use crate::shell::Approvals;
use crate::types::{ApprovalMatch, ApprovalSnapshot, Consumption, DenyReason, Domain, NewApproval};

/// One tool call asking for permission.
///
/// `key` is the adapter's dedup key: everything besides the arguments that makes two calls "the same" (DeepChat's
/// `bindingKey`: server id, config generation, tool name, permission type…). Two requests with equal
/// conversation, tool, key and arguments share one pending approval; any difference makes a new one.
/// `Debug` leaves the arguments out.
#[derive(Clone, Copy)]
pub struct ToolCall<'a> {
    /// The conversation (scope `tool:<conversation>`).
    pub conversation: &'a str,
    /// The tool's name (the bound method).
    pub tool: &'a str,
    /// The explicit dedup key (must not be empty).
    pub key: &'a str,
    /// The call's arguments (hashed canonically, never shown).
    pub args: &'a Value,
}

impl fmt::Debug for ToolCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCall")
            .field("conversation", &self.conversation)
            .field("tool", &self.tool)
            .field("key", &self.key)
            .field("args", &"<not shown>")
            .finish()
    }
}

/// What [`ToolPermissions::authorize_execution`] decided.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolAuthorization {
    /// An approval for exactly this call was approved and has now been spent: run it once.
    Allowed,
    /// Not approved (yet): this approval is pending (new, or the one already pending for this call).
    NeedsApproval(ApprovalSnapshot),
}

/// The tool-permission adapter over the shared broker ([`Domain::ToolPermission`], [`Consumption::Match`]).
#[derive(Clone, Debug)]
pub struct ToolPermissions {
    approvals: Approvals,
}

impl ToolPermissions {
    /// An adapter over the shared broker.
    pub fn new(approvals: Approvals) -> Self {
        Self { approvals }
    }

    /// The scope key of a conversation's tool approvals: `tool:<conversation>`.
    pub fn scope(conversation: &str) -> String {
        format!("tool:{conversation}")
    }

    /// The model pre-check: asks for permission for `call`, reusing the pending approval for the same call.
    /// `display` is what the renderer shows, already redacted.
    ///
    /// # Errors
    /// As [`ApprovalBroker::create`](crate::ApprovalBroker::create) (`invalid_request`, `rate_limited`).
    pub fn request(
        &self,
        call: ToolCall<'_>,
        display: Value,
    ) -> Result<ApprovalSnapshot, ApprovalError> {
        let scope = Self::scope(call.conversation);
        self.approvals.create(
            NewApproval::new(Domain::ToolPermission, &scope, call.tool, call.args)
                .dedup_key(call.key)
                .display(display)
                .consumption(Consumption::Match),
        )
    }

    /// The execution check: spends an approved approval for exactly this call (once), or else asks for one as
    /// [`request`](Self::request) does.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub fn authorize_execution(
        &self,
        call: ToolCall<'_>,
        display: Value,
    ) -> Result<ToolAuthorization, ApprovalError> {
        let scope = Self::scope(call.conversation);
        let spend = ApprovalMatch::new(Domain::ToolPermission, &scope, call.tool, call.args)
            .dedup_key(call.key);
        if self.approvals.consume_approved(&spend) {
            return Ok(ToolAuthorization::Allowed);
        }
        self.request(call, display)
            .map(ToolAuthorization::NeedsApproval)
    }

    /// The conversation was cancelled: deny its pending tool approvals and drop its approved-unspent ones
    /// ([`DenyReason::ScopeCancelled`]).
    pub fn cancel_conversation(&self, conversation: &str) {
        self.approvals
            .cancel_scope(&Self::scope(conversation), DenyReason::ScopeCancelled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_arguments() {
        let args = serde_json::json!({"password": "hunter2"});
        let call = ToolCall {
            conversation: "c1",
            tool: "db.login",
            key: "server-1",
            args: &args,
        };
        let shown = format!("{call:?}");
        assert!(shown.contains("db.login"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
