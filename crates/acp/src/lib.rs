//! ACP (Agent Client Protocol) v1 for agentwire: the client role and the agent role, on agentwire-jsonrpc.
//!
//! `agentwire-acp` drives ACP agents ([`Client`]: spawn one with `agentwire-process` or wrap any stream pair;
//! `initialize` with version negotiation, `authenticate`, `logout`,
//! `session/new|load|resume|list|close|delete|prompt|cancel|set_mode|set_config_option`, agent requests answered by
//! handler traits, `$/cancel_request` both ways) and builds them ([`AgentSide`] with an [`Agent`] implementation and a
//! [`ClientHandle`]). The wire types are the protocol maintainers' crate `agent-client-protocol-schema` (re-exported
//! as [`schema`]); the runtime is ours. The Kandev simplified dialect (string `protocolVersion`, `{type,data}`
//! updates) is detected at `initialize` and mapped onto the same session-update model ([`kandev`]).
//! [`conformance`] checks an agent command against the spec's obligations.
//!
//! It is **not** a JSON-RPC implementation (that is `agentwire-jsonrpc`) nor a process supervisor (that is
//! `agentwire-process`); it does not render, persist, or decide permissions (handlers do). Capabilities are
//! advertised from the handlers installed: `fs` with an [`FsHandler`], `terminal` with a [`TerminalHandler`]
//! ([`ProcessTerminals`] runs commands through agentwire-process), `elicitation` with an [`ElicitationHandler`].
//! Methods the agent did not advertise (`session/list|resume|close|delete` without the matching
//! `sessionCapabilities` entry, `logout` without `auth.logout`, `session/load` without `loadSession`) fail with
//! [`AcpError::CapabilityMissing`] before anything is sent.
//!
//! IO lives in `client.rs`, `agent.rs`, `stdio.rs`, `fs.rs` and `terminal.rs` (tokio tasks over the connection, the file system).
//! The decisions are pure and unit-tested: `turn.rs` (what a prompt answer means after a cancel), `update.rs`
//! (classifying `session/update`), `kandev.rs` (dialect mapping), `fs::select_lines` (`line`/`limit`), `terminal::OutputBuffer` (`outputByteLimit`).
//!
//! Spec: <https://agentclientprotocol.com/protocol/overview>; schema `fixtures/recordings/acp-schema-v1.json`;
//! notes in protocols/acp.md. Obligations this crate keeps:
//!
//! - **Fail closed.** The default permission handler rejects ([`RejectPermissions`]); elicitations are declined
//!   unless a handler is installed ([`DeclineElicitations`]); `fs` is advertised only when an [`FsHandler`] is
//!   installed, and the provided [`RootedFs`] refuses paths and symlinks out of its root,
//!   resolving every path beneath the root's descriptor at use time ([`fs::Confined`]: `openat2` with
//!   `RESOLVE_BENEATH`, or an `O_NOFOLLOW` walk), so a directory swapped for a symlink mid-request cannot leak a
//!   read or a write; FIFOs, sockets and devices are refused without blocking.
//! - **Cancellation.** [`Turn::cancel`] answers the turn's pending permission requests `cancelled`, keeps accepting
//!   updates, and reports the turn `cancelled` whatever the agent answers (an error, `end_turn`, …); a late
//!   duplicate answer is dropped and counted by the connection.
//! - **Routing.** Updates reach their session in arrival order, also before a `session/load` answer and after a
//!   `session/prompt` answer; unknown update kinds are kept raw ([`Update::Raw`]), never fatal.
//! - **Version.** An `initialize` answer other than 1 (or a Kandev string) closes the connection with
//!   [`AcpError::UnsupportedProtocolVersion`].

pub mod agent;
pub mod client;
pub mod conformance;
mod error;
pub mod fs;
mod handlers;
pub mod kandev;
mod stdio;
pub mod terminal;
pub mod turn;
pub mod update;

pub use agent::{Agent, AgentSide, Answered, ClientHandle};
pub use client::{
    Canceller, Client, ClientBuilder, ClientConfig, ClientStats, RoutedCount, Session, Turn,
    TurnEvent,
};
pub use error::AcpError;
pub use fs::{Confined, FsError, FsLimits, RootedFs};
pub use handlers::{
    DeclineElicitations, ElicitationHandler, FsHandler, PermissionHandler, RejectPermissions,
};
pub use kandev::Dialect;
pub use terminal::{OutputBuffer, ProcessTerminals, TerminalHandler, TerminalLimits};
pub use update::Update;

/// The ACP v1 wire types (`agent_client_protocol_schema::v1`), the protocol version type and `MaybeUndefined`
/// (fields where absent, `null` and a value differ, e.g. `session_info_update.title`).
pub mod schema {
    pub use agent_client_protocol_schema::v1::*;
    pub use agent_client_protocol_schema::{MaybeUndefined, ProtocolVersion};
}
