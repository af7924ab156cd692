//! How a turn answers Claude Code's `can_use_tool` control requests (stream-json agents with
//! [`crate::agents::AgentSpec::control_protocol`] on, launched with `--permission-prompt-tool stdio`): the same
//! policy shape as [`crate::acp_turn::AcpPermissions`] for ACP agents — the binary installs a terminal question or
//! `--yes`, and the default fails closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agentwire_awp::control::PermissionAnswer;

/// Message of a `can_use_tool` request denied without asking (no terminal, no `--yes`).
pub const DENIED_WITHOUT_A_TERMINAL: &str =
    "denied by awp-host: no terminal to ask on (pass --yes to allow tool use)";

/// One `can_use_tool` request: the tool and its input as the agent sent them (unescaped; escape before showing).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolPermissionRequest {
    /// `request.tool_name` (empty when missing).
    pub tool_name: String,
    /// `request.input` (`null` when missing).
    pub input: serde_json::Value,
}

/// A boxed decision.
pub type ToolPermissionFuture = Pin<Box<dyn Future<Output = PermissionAnswer> + Send>>;

/// The policy. Default: [`ToolPermissions::deny`] (fail closed).
#[derive(Clone)]
pub struct ToolPermissions(
    Arc<dyn Fn(ToolPermissionRequest) -> ToolPermissionFuture + Send + Sync>,
);

impl ToolPermissions {
    /// A policy from a function.
    pub fn new(
        decide: impl Fn(ToolPermissionRequest) -> ToolPermissionFuture + Send + Sync + 'static,
    ) -> Self {
        ToolPermissions(Arc::new(decide))
    }

    /// Deny every request with [`DENIED_WITHOUT_A_TERMINAL`].
    pub fn deny() -> Self {
        ToolPermissions::new(|_| {
            Box::pin(std::future::ready(PermissionAnswer::Deny(
                DENIED_WITHOUT_A_TERMINAL.to_owned(),
            )))
        })
    }

    /// Allow every request with its input unchanged (`--yes`).
    pub fn allow() -> Self {
        ToolPermissions::new(|_| Box::pin(std::future::ready(PermissionAnswer::Allow)))
    }

    /// Decides one request.
    pub async fn decide(&self, request: ToolPermissionRequest) -> PermissionAnswer {
        (self.0)(request).await
    }
}

impl Default for ToolPermissions {
    fn default() -> Self {
        ToolPermissions::deny()
    }
}

impl std::fmt::Debug for ToolPermissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolPermissions(..)")
    }
}
