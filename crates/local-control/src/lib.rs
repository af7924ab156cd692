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
//! What this crate deliberately is not: it has no method table, caller policy, approval logic or artifact
//! storage; those reach it through [`server::Service`]. It never listens on TCP.

pub mod client;
pub mod contract;
pub mod descriptor;
pub mod endpoint;
pub mod envelope;
pub mod json_limits;
pub mod limits;
pub mod server;
