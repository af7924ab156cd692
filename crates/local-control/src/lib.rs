//! DeepChat-compatible local control plane.
//!
//! This crate holds the pieces of DeepChat's "Local Control Plane and Bundled CLI" that agentwire reuses.
//! [`contract`] is the typed params/result DTOs of every method the `deepchat` CLI calls, shaped exactly as
//! DeepChat's zod route contracts so that DeepChat's strict client accepts our server's answers.
//! The contract module does no IO: it is serde types plus validation of the limits zod enforces.

pub mod contract;
