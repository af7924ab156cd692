//! The policy half of the DeepChat-compatible local control plane: who may call what, and what it costs.
//!
//! This half of `agentwire-local-control` decides; it does not listen, parse HTTP or dispatch.
//! [`surface`] is the deny-by-default registry of exposed methods (DeepChat's `CLI_SURFACE`), [`policy`] the
//! effect table, ownership rule and Agent compute admission, [`caller`] the caller model built from the
//! authenticated transport, [`tokens`] the short-lived scoped Agent tokens, [`hub`] the typed per-run event
//! hub with bounded subscribers and resumable cursors, and [`audit`] the size-capped JSONL policy audit log.
//! Everything but the hub's async wait and the audit file is sans-IO: clocks come in as `now: Instant`.
//!
//! Source: DeepChat "Local Control Plane and Bundled CLI" spec (sections "Caller Model", "Effect Policy",
//! "Agent Token and Bundled Skill", "Typed Event Hub and Detached Runs") and DeepChat's `src/main/cli/`
//! (`surface.ts`, `policy.ts`, `agentTokenAuthority.ts`), `src/shared/contracts/localControl.ts`.

pub mod audit;
pub mod caller;
pub mod hub;
pub mod policy;
pub mod surface;
pub mod tokens;
