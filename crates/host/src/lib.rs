//! agentwire-host: the domain of the headless AWP host — agents registry and configuration, conversation threads,
//! runs, the SQLite store and the turn runner that ties an agent session, the store and event rendering together.
//!
//! It is not a CLI: argument parsing, rendering and exit codes live in the `awp-host` binary. It is not a protocol
//! crate either: the AWP wire contract lives in `agentwire-awp`. IO lives in [`store`] (SQLite files), [`paths`]
//! (directory creation), [`providers`] (the credential file beside the store), [`attachments`] (reading attachment files), [`agents`] (reading `agents.toml`) and
//! [`turn`] (the agent child process, through `agentwire-awp`'s session shell) and [`acp_turn`] (ACP agents, through
//! `agentwire-acp`'s client), and [`tasks`] (the managed-task API on a TCP listener, tasks in the store, workers
//! spawning allow-listed programs through `agentwire-process`).

pub mod acp_turn;
pub mod agents;
pub mod attachments;
pub mod control;
pub mod detached;
pub mod export;
pub mod ids;
pub mod launch_extras;
pub mod paths;
pub mod providers;
pub mod store;
pub mod tasks;
pub mod tool_permissions;
pub mod turn;

pub use agents::{AgentEntry, AgentError, AgentProtocol, AgentRegistry, AgentSpec, ConfigError};
pub use attachments::{Attachment, AttachmentError, AttachmentLimits};
pub use ids::{IdError, RunId, TaskId, ThreadId};
pub use providers::{ApiKey, ProviderError, ProviderRegistry, ResolvedModel};
pub use store::{RunStatus, Store, StoreError};
pub use turn::{
    LiveAgent, TurnOptions, TurnReport, TurnRequest, TurnSetupError, run_turn, run_turn_live,
};
