//! `CliMutationGuard`: one fresh, never-deduplicated approval per sensitive CLI mutation, waited on while the
//! request stays open, denied when the request or its connection goes away, refused at once with no renderer.
//!
//! Checked against DeepChat's `src/main/cli/mutationGuard.ts` and its tests, and the spec's "ApprovalBroker"
//! section ("CLI approvals do not deduplicate identical concurrent calls: otherwise one click could resume
//! multiple mutations").

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::error::GuardError;
use crate::shell::Approvals;
use crate::types::{ApprovalId, Decision, DenyReason, Domain, NewApproval};

/// One sensitive mutation asking for approval: the connection it came on, the method, the arguments (hashed,
/// never shown, not even by `Debug`) and the redacted display data (shown).
#[derive(Clone)]
pub struct CliMutation<'a> {
    connection: &'a str,
    method: &'a str,
    args: &'a Value,
    display: Value,
    timeout: Option<Duration>,
}

impl<'a> CliMutation<'a> {
    /// A mutation of `method` with `args` from connection `connection` (any stable id of the authenticated
    /// local-control connection); no display data, the broker's default timeout (2 min).
    pub fn new(connection: &'a str, method: &'a str, args: &'a Value) -> Self {
        Self {
            connection,
            method,
            args,
            display: Value::Null,
            timeout: None,
        }
    }

    /// What the renderer shows, already redacted by the caller (e.g. a URL's host, `queryPresent: true`).
    pub fn display(mut self, display: Value) -> Self {
        self.display = display;
        self
    }

    /// This request's approval timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl fmt::Debug for CliMutation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CliMutation")
            .field("connection", &self.connection)
            .field("method", &self.method)
            .field("args", &"<not shown>")
            .field("display", &self.display)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Proof, inside this process, that the renderer approved this one request. Not `Clone`, not serializable: the
/// continuation that awaited [`CliMutationGuard::authorize`] is the only one it resumes.
#[derive(Debug, PartialEq, Eq)]
pub struct Authorized {
    approval: ApprovalId,
}

impl Authorized {
    /// The id of the approval that was granted and spent (for the audit record).
    pub fn approval_id(&self) -> ApprovalId {
        self.approval
    }
}

/// Guards sensitive CLI mutations with renderer approval ([`Domain::CliMutation`], scope `cli:<connection>`).
///
/// ```
/// # use agentwire_approval::{Approvals, CliMutation, CliMutationGuard, Limits};
/// # async fn handler(approvals: Approvals) {
/// let guard = CliMutationGuard::new(approvals);
/// let args = serde_json::json!({"url": "https://example.com/skill.git?sig=secret"});
/// let display = serde_json::json!({"host": "example.com", "queryPresent": true});
/// match guard.authorize(CliMutation::new("conn-7", "skills.installFromUrl", &args).display(display)).await {
///     Ok(_authorized) => { /* run the mutation with exactly `args` */ }
///     Err(error) => { /* answer error.code(): approval_denied, approval_timeout, rate_limited, … */ }
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct CliMutationGuard {
    approvals: Approvals,
}

impl CliMutationGuard {
    /// A guard over the shared broker.
    pub fn new(approvals: Approvals) -> Self {
        Self { approvals }
    }

    /// The scope key of a connection's approvals: `cli:<connection>` (DeepChat's `cli:${connectionId}`).
    pub fn scope(connection: &str) -> String {
        format!("cli:{connection}")
    }

    /// Asks the renderer to approve `mutation` and waits for the answer.
    ///
    /// Every call creates a new approval, even for a request identical to one already pending, so one approval
    /// resumes exactly one mutation. With no renderer attached it fails at once without creating anything. If
    /// this future is dropped before the answer (the HTTP request was aborted), the approval is denied
    /// [`DenyReason::ConnectionClosed`] and a later resolution fails with `not_found`.
    ///
    /// # Errors
    /// [`GuardError::NoRenderer`] and [`GuardError::Denied`] (`approval_denied`), [`GuardError::Timeout`]
    /// (`approval_timeout`), [`GuardError::Cancelled`] (`cancelled`, the broker was cleared), or
    /// [`GuardError::Rejected`] (`invalid_request` for arguments/display over the canonical limits, `rate_limited`
    /// at 64 pending approvals on the connection).
    pub async fn authorize(&self, mutation: CliMutation<'_>) -> Result<Authorized, GuardError> {
        let scope = Self::scope(mutation.connection);
        let mut request =
            NewApproval::new(Domain::CliMutation, &scope, mutation.method, mutation.args)
                .display(mutation.display);
        if let Some(timeout) = mutation.timeout {
            request = request.timeout(timeout);
        }
        let Some((snapshot, registration)) =
            self.approvals.create_waiting_with_renderer(request)?
        else {
            return Err(GuardError::NoRenderer);
        };
        let mut deny_on_drop = DenyOnDrop {
            approvals: &self.approvals,
            id: snapshot.id,
            scope: &scope,
            armed: true,
        };
        let decision = self.approvals.await_registration(registration).await;
        deny_on_drop.armed = false;
        match decision {
            Decision::Approved => Ok(Authorized {
                approval: snapshot.id,
            }),
            Decision::Denied { reason } => Err(GuardError::Denied { reason }),
            Decision::Expired => Err(GuardError::Timeout),
            Decision::Cancelled => Err(GuardError::Cancelled),
        }
    }

    /// The connection went away: deny all its pending approvals ([`DenyReason::ConnectionClosed`]); their
    /// `authorize` calls return `approval_denied` and later resolutions fail.
    pub fn connection_closed(&self, connection: &str) {
        self.approvals
            .cancel_scope(&Self::scope(connection), DenyReason::ConnectionClosed);
    }
}

impl fmt::Debug for CliMutationGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CliMutationGuard")
            .field("approvals", &self.approvals)
            .finish()
    }
}

/// Denies the request's approval if `authorize` is dropped before its decision.
struct DenyOnDrop<'a> {
    approvals: &'a Approvals,
    id: ApprovalId,
    scope: &'a str,
    armed: bool,
}

impl Drop for DenyOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            // `not_found` means it was decided meanwhile: nothing left to deny.
            let _ = self
                .approvals
                .cancel(self.id, self.scope, DenyReason::ConnectionClosed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_arguments() {
        let args = serde_json::json!({"token": "ghp_secret"});
        let shown = format!("{:?}", CliMutation::new("conn", "mcp.add", &args));
        assert!(shown.contains("mcp.add"), "{shown}");
        assert!(!shown.contains("ghp_secret"), "{shown}");
    }
}
