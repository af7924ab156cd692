//! The JSON-RPC echo peer shared by `agentwire-jsonrpc`'s process tests and its `rpc_latency` bench, and the code
//! that connects a [`Connection`] to a child process's stdio.
//!
//! A test or bench binary that needs a peer process spawns itself with [`PEER_FLAG`] and, when it finds the flag in
//! its arguments, runs [`run_stdio_peer`] instead of its cases (so the peer is built with the same profile as the
//! code it is measured against).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentwire_jsonrpc::{
    Config, Connection, DEFAULT_MAX_LINE_BYTES, ErrorObject, Incoming, IncomingMessage,
};
use agentwire_process::{Child, Command, StdoutItem};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

/// The argument that makes a self-spawning test or bench binary run [`run_stdio_peer`].
pub const PEER_FLAG: &str = "--peer";

/// Serves `incoming` until it ends:
///
/// - `echo` answers its params (`null` without);
/// - `count` answers how many notifications arrived before it (all are read in order, so the count is exact);
/// - `callback` calls `client/method` on the caller with its params and answers `{"client said": <answer>}`;
/// - `storm` `{"count": n}` sends `n` notifications `storm` `{"seq": i}` in order, then answers `"done"`;
/// - any other method is answered with `-32601` (method not found).
///
/// `echo` and `count` are answered inline (no task per request, for the latency bench); `callback` and `storm` in a
/// task of their own, so the peer keeps reading while they wait. Notifications are counted into `notifications`.
pub async fn serve(connection: Connection, mut incoming: Incoming, notifications: Arc<AtomicU64>) {
    while let Some(message) = incoming.next().await {
        let mut request = match message {
            IncomingMessage::Notification(_) => {
                notifications.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            IncomingMessage::Request(request) => request,
        };
        let params = request.params.take().unwrap_or(Value::Null);
        match request.method.as_str() {
            "echo" => {
                if request.respond(Ok(params)).await.is_err() {
                    return;
                }
            }
            "count" => {
                let seen = json!(notifications.load(Ordering::Relaxed));
                if request.respond(Ok(seen)).await.is_err() {
                    return;
                }
            }
            "callback" | "storm" => {
                let connection = connection.clone();
                tokio::spawn(async move {
                    let result = if request.method == "callback" {
                        match connection.call("client/method", Some(params)).await {
                            Ok(answer) => Ok(json!({"client said": answer})),
                            Err(error) => Err(ErrorObject::internal_error(error.to_string())),
                        }
                    } else {
                        storm(&connection, &params).await
                    };
                    if let Err(error) = request.respond(result).await {
                        eprintln!("peer: answer not sent: {error}");
                    }
                });
            }
            other => {
                let other = other.to_owned();
                if request
                    .respond(Err(ErrorObject::method_not_found(&other)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

async fn storm(connection: &Connection, params: &Value) -> Result<Value, ErrorObject> {
    let count = params.get("count").and_then(Value::as_u64).unwrap_or(0);
    for seq in 0..count {
        connection
            .notify("storm", Some(json!({"seq": seq})))
            .await
            .map_err(|error| ErrorObject::internal_error(error.to_string()))?;
    }
    Ok(json!("done"))
}

/// The peer process: [`serve`] over `Connection::stdio()` until stdin ends, then closes the connection.
pub async fn run_stdio_peer() {
    let (connection, incoming) = Connection::stdio(Config::default());
    serve(connection.clone(), incoming, Arc::default()).await;
    connection.close().await;
}

/// Spawns `command` with its stdout framed as JSON Lines (at most [`DEFAULT_MAX_LINE_BYTES`] a line) and connects a
/// [`Connection`] to its stdio: its stdout frames in, its stdin out (`Connection::from_frames`).
///
/// # Errors
/// The spawn error, as text.
pub fn connect(command: &mut Command) -> Result<(Child, Connection, Incoming), String> {
    let limits = agentwire_jsonl::Limits {
        max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        ..Default::default()
    };
    let mut child = command
        .stdout_jsonl(limits)
        .spawn()
        .map_err(|error| format!("spawn: {error}"))?;
    let stdin = child.stdin();
    let frames = child
        .take_stdout()
        .ok_or("stdout taken")?
        .filter_map(|item| async move {
            match item {
                StdoutItem::Frame(frame) => Some(frame),
                _ => None,
            }
        });
    let write = move |lines: Vec<u8>| {
        let stdin = stdin.clone();
        async move { stdin.write_all(&lines).await.map_err(std::io::Error::other) }
    };
    let (connection, incoming) = Connection::from_frames(frames, write, Config::default());
    Ok((child, connection, incoming))
}

/// Spawns the running executable with [`PEER_FLAG`] and connects to it (see [`connect`]).
///
/// # Errors
/// When the running executable's path is unknown or the spawn fails.
pub fn spawn_self_peer() -> Result<(Child, Connection, Incoming), String> {
    let exe = std::env::current_exe().map_err(|error| format!("current_exe: {error}"))?;
    connect(Command::new(exe).arg(PEER_FLAG))
}
