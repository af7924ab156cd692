//! The approval broker: one main-owned state machine for every approval the host asks a human for, with a
//! thin tokio shell to wait on it.
//!
//! An approval is bound to its domain, scope, method, the SHA-256 of its arguments' canonical JSON
//! ([`canonical_json`], [`ArgsHash`]) and an expiry; it is consumed at most once. Display data is passed
//! separately and already redacted: nothing shown to a renderer is derived from the arguments here.
//! Source: DeepChat "Local Control Plane and Bundled CLI" spec, sections "ApprovalBroker" and the security
//! invariants (renderer-only resolution, one-shot consumption, no dedup of CLI mutations), and DeepChat's code
//! (`src/main/approval/approvalBroker.ts`, `src/main/cli/mutationGuard.ts`,
//! `src/main/tool/permission/toolPermissionBroker.ts`); DESIGN.md invariant 8.
//!
//! It is **not** a transport or a UI: it does not know HTTP, sockets or terminals. The local-control layer puts
//! [`CliMutationGuard`] in front of sensitive methods and converts snapshots/events to wire DTOs; the host's
//! approvals console is a [`Renderer`].
//!
//! # Layers
//!
//! - **Sans-IO core** ([`ApprovalBroker`]): `create`, `resolve`, `consume_approved` / `take_approved`,
//!   `cancel` / `cancel_scope` / `cancel_domain`, `clear`, `handle_timeout(now)`, `pending(now)`, and
//!   `poll_event()` drained after each call. It never reads a clock: every time is a `now: Instant` argument.
//! - **Tokio shell** ([`Approvals`]): the core in a mutex; reads tokio's clock, so a paused test runtime drives
//!   it on virtual time; [`Approvals::wait`] resolves to a [`Decision`] (`Approved`, `Denied{reason}`,
//!   `Expired`, `Cancelled`), waking itself at the approval's expiry; [`Approvals::run_expiry`] expires unwaited
//!   approvals on time; [`Approvals::pending`] is the status view the CLI socket may expose. Renderers attach with
//!   [`Approvals::attach_renderer`], receive every event ([`Renderer::next_event`]) and are the only holders of
//!   `resolve`.
//! - **Adapters**: [`CliMutationGuard`] (a fresh approval per request, never deduplicated; denied when the request
//!   or its connection goes away; `approval_denied` at once when no renderer is attached) and
//!   [`ToolPermissions`] (pre-check, then one approved execution; deduplicated by an explicit key while pending).
//!
//! # Guarantees (each pinned by tests, several by the proptest state-machine test)
//!
//! - Consumed at most once; never approved without a renderer's `resolve`; never resolved or consumed after its
//!   denial, cancellation, expiry or consumption (`not_found` / `approval_timeout`).
//! - Expiry (default 2 min) decides a pending approval `Expired`; at exactly its expiry instant it is expired.
//! - At most 64 live approvals per scope: the 65th create is `rate_limited` ([`ApprovalError::ScopeFull`]).
//! - Canonical arguments: keys sorted (UTF-16 order, as JavaScript), depth ≤ 64, ≤ 10 000 keys, ≤ 1 MiB, finite
//!   numbers; `invalid_request` otherwise ([`CanonicalError`]).
//!
//! ```
//! use agentwire_approval::{Approvals, CliMutation, CliMutationGuard, Limits, RendererEvent, ApprovalEvent, Resolution};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let approvals = Approvals::new(Limits::default());
//! let mut console = approvals.attach_renderer();
//! let guard = CliMutationGuard::new(approvals.clone());
//! let args = json!({"provider": "openai", "model": "gpt-x"});
//! let mutation = guard.authorize(CliMutation::new("conn-1", "settings.setDefaultModel", &args));
//! let renderer = async {
//!     let Some(RendererEvent::Approval(ApprovalEvent::Created(shown))) = console.next_event().await else {
//!         return;
//!     };
//!     console.resolve(shown.id, &shown.scope, Resolution::Approve).unwrap();
//! };
//! let (authorized, ()) = tokio::join!(mutation, renderer);
//! assert!(authorized.is_ok());
//! # });
//! ```

#![warn(missing_docs)]

mod broker;
mod canonical;
mod error;
mod guard;
mod shell;
mod tool;
mod types;

pub use broker::{
    ApprovalBroker, DEFAULT_MAX_DEDUP_KEY_BYTES, DEFAULT_MAX_DISPLAY_BYTES,
    DEFAULT_MAX_METHOD_BYTES, DEFAULT_MAX_PENDING_PER_SCOPE, DEFAULT_MAX_PENDING_TOTAL,
    DEFAULT_MAX_SCOPE_BYTES, DEFAULT_MAX_TIMEOUT, DEFAULT_TIMEOUT, Limits,
};
pub use canonical::{
    ArgsHash, CanonicalLimits, DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, DEFAULT_MAX_KEYS,
    canonical_json,
};
pub use error::{ApprovalError, CanonicalError, GuardError};
pub use guard::{Authorized, CliMutation, CliMutationGuard};
pub use shell::{Approvals, RENDERER_EVENT_BUFFER, Renderer, RendererEvent};
pub use tool::{ToolAuthorization, ToolCall, ToolPermissions};
pub use types::{
    ApprovalEvent, ApprovalId, ApprovalMatch, ApprovalSnapshot, ApprovalStatus, Consumption,
    Decision, DenyReason, Domain, NewApproval, Resolution,
};
