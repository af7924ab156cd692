//! DeepChat-compatible local control plane for agentwire: the transport half.
//!
//! A host serves HTTP/1.1 over a private Unix socket and advertises it through a descriptor file holding a
//! per-start bearer token; thin clients (the `deepchat` CLI) discover the descriptor, check it, and call methods.
//! Wire shapes follow DeepChat's `src/shared/contracts/localControl.ts` so that either side interoperates with
//! DeepChat's.
//!
//! - [`envelope`], [`json_limits`], [`limits`]: pure data and checks (no IO).
//! - [`descriptor`]: the descriptor's shape, atomic writing, ownership-checked removal, client discovery.
//! - [`endpoint`]: private directories, locked stale-socket handling, bind and post-bind verification.
//! - [`server`]: the hyper server and the [`server::Service`] trait the host implements.
//! - [`client`]: a connect-per-request client with timeouts and strict stream parsing.
//! - [`contract`]: typed params/result DTOs of every method, shaped as DeepChat's zod route contracts (no IO).
//!
//! The policy half decides who may call what, and what it costs: [`surface`] is the deny-by-default registry of
//! exposed methods (DeepChat's `CLI_SURFACE`), [`policy`] the effect table, ownership rule and Agent compute
//! admission, [`caller`] the caller model built from the authenticated transport, [`tokens`] the short-lived scoped
//! Agent tokens, [`hub`] the typed per-run event hub with bounded subscribers and resumable cursors, and [`audit`]
//! the size-capped JSONL policy audit log. Everything but the hub's async wait and the audit file is sans-IO:
//! clocks come in as `now: Instant`. Source: DeepChat "Local Control Plane and Bundled CLI" spec (sections "Caller
//! Model", "Effect Policy", "Agent Token and Bundled Skill", "Typed Event Hub and Detached Runs") and DeepChat's
//! `src/main/cli/` (`surface.ts`, `policy.ts`, `agentTokenAuthority.ts`), `src/shared/contracts/localControl.ts`.
//!
//! # Use
//!
//! Host: implement [`server::Service`] (method table via `route`, agent-token check, `authorize`, then `call` /
//! `stream` / `upload` / `download`) and run `Server::start(ServerConfig::new(data_dir, app_version), service)`;
//! it binds `<data_dir>/local-control/control.sock`, then writes `local-control.json`. End with
//! `server.shutdown().await`.
//! Client: `descriptor::discover(data_dir)`, `client::select_token(&descriptor, env::var_os(AGENT_TOKEN_ENV))`,
//! `Client::from_descriptor(&descriptor, token)`, then `rpc` / `stream` / `upload` / `download`, each with a timeout.
//! Errors carry the envelope's [`envelope::ErrorCode`], whose `exit_code()` is the CLI exit code.
//!
//! Not built yet: Windows named pipes; spilling rpc/stream request bodies above 256 KiB to a file (they are held in
//! memory, bounded by the method's limit); a `GET /v1/events` route (DeepChat serves events as the stream method
//! `events.subscribe`).
//!
//! What this crate deliberately is not: it has no approval state machine or artifact storage (those are
//! `agentwire-approval` and `agentwire-spool`, wired by the host through [`server::Service`]). It never listens on
//! TCP.

pub mod client;
pub mod contract;
pub mod descriptor;
pub mod endpoint;
pub mod envelope;
pub mod json_limits;
pub mod limits;
pub mod server;

pub mod audit;
pub mod caller;
pub mod hub;
pub mod policy;
pub mod surface;
pub mod tokens;
