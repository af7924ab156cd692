//! The peer's requests and notifications, in arrival order, each request with a responder that answers it once.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::connection::{Out, Shared};
use crate::error::SendError;
use crate::message::{ErrorObject, Notification, Request, RequestId, ResponseRef};

/// The stream of the peer's requests and notifications, in the order they were read.
///
/// Drain it: while its queue ([`Config::incoming_queue`](crate::Config::incoming_queue)) is full the reader stops
/// reading, and responses to our own calls wait behind it. `$/cancel_request` notifications are not delivered here:
/// they mark the matching [`IncomingRequest`] cancelled.
///
/// Dropping it does not close the connection while [`Connection`](crate::Connection) handles remain: calls still
/// work, notifications from the peer are dropped, and every request from the peer is answered at once with
/// `-32603 "request dropped without a response"` (counted in
/// [`Stats::dropped_responders`](crate::Stats::dropped_responders)).
#[derive(Debug)]
pub struct Incoming {
    rx: mpsc::Receiver<IncomingMessage>,
    /// Keeps the output open while the application may still answer.
    _out: Out,
}

impl Incoming {
    pub(crate) fn new(rx: mpsc::Receiver<IncomingMessage>, out: Out) -> Self {
        Incoming { rx, _out: out }
    }

    /// The next message, or `None` once the connection is closed and every queued message was taken.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Option<IncomingMessage> {
        self.rx.recv().await
    }
}

/// One message from the peer that is not a response.
#[derive(Debug)]
pub enum IncomingMessage {
    /// A request: answer it with [`IncomingRequest::respond`].
    Request(IncomingRequest),
    /// A notification (never answered).
    Notification(Notification),
}

/// A request from the peer. Answer it exactly once with [`respond`](Self::respond); dropping it unanswered answers
/// `-32603 "request dropped without a response"`.
///
/// JSON received: `{"jsonrpc":"2.0","id":0,"method":"fs/read_text_file","params":{…}}`.
#[derive(Debug)]
pub struct IncomingRequest {
    /// The peer's id (the peer's id space, unrelated to ours).
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The parameters; `None` when absent or `null`. Take them with `params.take()`.
    pub params: Option<Value>,
    responder: Responder,
}

impl IncomingRequest {
    pub(crate) fn new(request: Request, responder: Responder) -> Self {
        IncomingRequest {
            id: request.id,
            method: request.method,
            params: request.params,
            responder,
        }
    }

    /// Answers the request: `Ok(result)` or `Err(error)`.
    ///
    /// JSON sent: `{"jsonrpc":"2.0","id":0,"result":{…}}` or `{"jsonrpc":"2.0","id":0,"error":{…}}`.
    ///
    /// # Errors
    ///
    /// [`SendError::ConnectionClosed`] when the writer has stopped; [`SendError::Encode`] (then -32603 is sent
    /// instead, as for a dropped request).
    pub async fn respond(self, result: Result<Value, ErrorObject>) -> Result<(), SendError> {
        self.responder.respond(result).await
    }

    /// Whether the peer sent `$/cancel_request` for this request. The request must still be answered (a result,
    /// or [`ErrorObject::request_cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.responder.is_cancelled()
    }

    /// Resolves when the peer sends `$/cancel_request` for this request (at once if it already did).
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.responder.cancelled()
    }

    /// Splits into the request and its responder, to move the params out and answer later.
    pub fn into_parts(self) -> (Request, Responder) {
        (
            Request {
                id: self.id,
                method: self.method,
                params: self.params,
            },
            self.responder,
        )
    }
}

/// Answers one incoming request; see [`IncomingRequest`]. Dropping it unanswered answers -32603.
pub struct Responder {
    id: RequestId,
    out: Option<Out>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    answered: bool,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("id", &self.id)
            .field("cancelled", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Responder {
    pub(crate) fn new(
        id: RequestId,
        out: Option<Out>,
        shared: Arc<Shared>,
        cancel: CancellationToken,
    ) -> Self {
        Responder {
            id,
            out,
            shared,
            cancel,
            answered: false,
        }
    }

    /// The id of the request this answers.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// See [`IncomingRequest::is_cancelled`].
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// See [`IncomingRequest::cancelled`].
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// See [`IncomingRequest::respond`].
    ///
    /// # Errors
    ///
    /// As [`IncomingRequest::respond`].
    pub async fn respond(mut self, result: Result<Value, ErrorObject>) -> Result<(), SendError> {
        let line = agentwire_jsonl::to_line(&ResponseRef {
            id: Some(&self.id),
            result: result.as_ref(),
        })?;
        let out = self.out.as_ref().ok_or(SendError::ConnectionClosed)?;
        out.send(line).await?;
        self.answered = true;
        Ok(())
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.shared.finish_incoming(&self.id);
        if self.answered {
            return;
        }
        self.shared.count_dropped_responder();
        let Some(out) = self.out.take() else { return };
        let error = ErrorObject::internal_error("request dropped without a response");
        let line = match agentwire_jsonl::to_line(&ResponseRef {
            id: Some(&self.id),
            result: Err(&error),
        }) {
            Ok(line) => line,
            Err(error) => {
                tracing::error!(%error, "json-rpc -32603 answer could not be encoded");
                return;
            }
        };
        // Never blocks: a full queue is waited on by a background task, which gives up when the output closes.
        if out
            .send_in_background(line, "-32603 answer to a dropped request")
            .is_err()
        {
            tracing::debug!(id = %self.id, "json-rpc dropped request not answered: writer stopped");
        }
    }
}
