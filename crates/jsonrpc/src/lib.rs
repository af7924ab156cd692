//! JSON-RPC 2.0 for agentwire: strict message types and a bidirectional connection over any byte stream.
//!
//! `agentwire-jsonrpc` is the JSON-RPC layer under ACP: [`Message`] and its parts ([`Request`], [`Notification`],
//! [`Response`], [`ErrorObject`] with an open [`ErrorCode`]) parsed strictly and serialized with `"jsonrpc":"2.0"`,
//! and a [`Connection`] that calls, notifies, answers and cancels over one `AsyncRead` + `AsyncWrite` pair, one JSON
//! message per line (framing by `agentwire-jsonl`).
//! It is **not** a protocol: it knows no method names except `$/cancel_request`, and it does not dispatch requests
//! to handlers (the application reads [`Incoming`] and decides). It does not spawn processes: give it a child's
//! stdout/stdin from `agentwire-process`, a Unix socket, or [`Connection::memory`].
//! IO lives in `connection.rs`: one reader task and one writer task per connection, on the caller's tokio runtime.
//! `message.rs` is pure (bytes in, values out).
//!
//! # Choices (each one tested)
//!
//! - **Separate id spaces.** Our requests are numbered 0, 1, 2, …; a response is matched only against our own
//!   pending calls. An incoming request with id 0 has nothing to do with our call 0.
//! - **Responses to unknown ids are dropped and counted** ([`Stats::unknown_responses`],
//!   [`Stats::late_responses`] for calls that timed out or were cancelled), never an error.
//! - **Cancellation both ways** (`$/cancel_request {"requestId": id}`, LSP's convention, used by ACP):
//!   [`Connection::cancel`] resolves our call with [`CallError::Cancelled`] and tells the peer;
//!   a peer's cancel marks the [`IncomingRequest`] ([`IncomingRequest::is_cancelled`] / `cancelled().await`), which
//!   must still be answered (a result, or -32800 [`ErrorObject::request_cancelled`]).
//!   `$/cancel_request` is a notification; sent as a request (with an id) it is not acted on and is answered -32600.
//! - **Every request is answered once.** Dropping an [`IncomingRequest`] unanswered answers -32603.
//! - **Bad input is answered, counted, and survived:** a line that is not JSON gets -32700 with `"id": null`; JSON
//!   that is not a valid message gets -32600 (with its id when readable), also valid JSON we cannot hold (a lone
//!   surrogate escape, nesting deeper than 128); a response-shaped invalid message is never answered (two peers
//!   could otherwise exchange errors forever) but fails the call it names, if any; a message with both `method`
//!   and `result`/`error` is answered -32600 and also fails our pending call with its id, if any.
//! - **No batches.** A JSON array gets one -32600 with `"id": null`. ACP and the other protocols agentwire speaks
//!   never batch, and supporting batches would mean buffering a whole batch's answers before writing any.
//! - **Bounded everywhere** ([`Config`]): line length (64 MiB default, see [`DEFAULT_MAX_LINE_BYTES`]), pending
//!   calls, requests in flight, and both queues. A full incoming queue stops the reader (back-pressure to the peer).
//! - **Closing is total.** On EOF, a read error or a write error, every pending call fails with
//!   [`CallError::ConnectionClosed`] and [`Connection::closed`] resolves; no write error is ignored.
//! - **A peer that stops reading cannot hang us.** Call timeouts cover queueing, [`Connection::cancel`] never
//!   waits, [`Connection::close`] closes at once and flushes within [`Config::close_flush_timeout`] (also when every
//!   handle is dropped), and [`Connection::abort`] drops the stream without flushing.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use agentwire_jsonrpc::{Config, Connection, IncomingMessage};
//! use serde_json::json;
//!
//! let ((client, _client_incoming), (_agent, mut agent_incoming)) = Connection::memory(Config::default());
//! tokio::spawn(async move {
//!     while let Some(IncomingMessage::Request(request)) = agent_incoming.next().await {
//!         let answer = json!({ "echo": request.params.clone() });
//!         request.respond(Ok(answer)).await.unwrap();
//!     }
//! });
//! let result = client.call("ping", Some(json!({"n": 1}))).await.unwrap();
//! assert_eq!(result, json!({"echo": {"n": 1}}));
//! # }
//! ```

mod connection;
mod error;
mod incoming;
mod message;

pub use connection::{
    CANCEL_REQUEST_METHOD, Config, Connection, DEFAULT_MAX_LINE_BYTES, PendingCall, Stats,
};
pub use error::{CallError, CloseReason, SendError};
pub use incoming::{Incoming, IncomingMessage, IncomingRequest, Responder};
pub use message::{
    ErrorCode, ErrorObject, InvalidMessage, JSONRPC_VERSION, Message, Notification, Request,
    RequestId, Response,
};
