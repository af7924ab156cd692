//! agentwire-awp: the AWP agent CLI protocol — launch contract, input lines, output events, the sans-IO turn
//! machine and its tokio shell.
//!
//! What it is: everything a host needs to drive one agent CLI subprocess per conversation, speaking JSON Lines
//! in `awp-jsonl` or Claude Code's `stream-json` dialect ([`launch`] turns the `AWP_AGENT_CLI_*` variables into
//! a validated [`LaunchPlan`]; [`input`] writes user lines; [`event`] parses agent lines; [`machine`] enforces
//! the turn rules and normalizes to [`NormalizedEvent`]; [`session`] runs a real process).
//! What it is not: a host (no persistence, no rendering, no threads — see `agentwire-host`), nor an agent
//! (see `bins/awp-agent`). It never executes the agent's tools.
//! Where IO lives: only in [`session`] (spawning through `agentwire-process`, pipes, timers) and in
//! [`LaunchConfig::validate`] (reads the executable's file metadata). [`machine`], [`event`], [`input`] and
//! [`normalized`] are pure: they take bytes, values and `now: Instant` and return values.
//!
//! Sources: the AWP agent CLI protocol (`docs/agent-cli-protocol.md` of AWP Desktop) and the implementation
//! notes `protocols/awp.md`; stream-json checked against Claude Code 2.1.197 recordings in
//! `fixtures/recordings/`.

mod borrowed;
pub mod conformance;
pub mod control;
pub mod event;
pub mod input;
pub mod launch;
pub mod machine;
pub mod normalized;
pub mod session;
mod session_id;

pub use event::{EventError, OutputEvent};
pub use input::{ContentBlock, shutdown_line, user_line};
pub use launch::{LaunchConfig, LaunchError, LaunchPlan, Protocol};
pub use machine::{
    Action, Counters, ExitInfo, Limits, MachineConfig, StdoutDecoder, TurnMachine, TurnRejected,
};
pub use normalized::{NormalizedEvent, TurnOutcome, TurnStatus, Usage, codes};
pub use session::{
    AgentSession, ControlError, Diagnostics, SessionItem, SessionOptions, SpawnError, TurnError,
};
pub use session_id::{InvalidSessionId, MAX_SESSION_ID_BYTES, SessionId};
