//! The approver socket (`awp-host serve --approvals-socket PATH`): a second Unix socket, with its own credential,
//! through which one trusted approver program acts as a renderer of the approval broker.
//!
//! It is deliberately not the CLI socket: the CLI surface exposes approval status only, never resolution
//! (DESIGN.md invariant 8; DeepChat resolves only from its renderer). The credential is a fresh 256-bit token
//! written to `PATH.token` (0600) at start; the approver reads it from there.
//!
//! Protocol: JSON Lines, each line at most [`MAX_LINE_BYTES`].
//! - approver → host, first line: `{"type":"hello","token":"<contents of PATH.token>"}`; a wrong token closes the
//!   connection after `{"type":"error","code":"authentication_failed"}`; the right one is answered
//!   `{"type":"ready"}` once the approver is attached as a renderer (from then on approvals wait for it).
//! - host → approver: `{"type":"approval","id":"000000000000002a","scope":"…","method":"settings.updatePublic",
//!   "display":{…},"expiresInMs":119000}` for every pending approval (those already pending first), and
//!   `{"type":"closed","id":"…","decision":"approved|denied|expired|cancelled"}` when one leaves.
//! - approver → host: `{"type":"resolve","id":"…","decision":"allow"|"deny"}`; answered
//!   `{"type":"resolved","id":"…"}` or `{"type":"error","id":"…","code":"not_found|approval_timeout|…"}`.
//!
//! Only connections from this user are accepted (peer credentials), the socket is 0600 in the caller's directory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use agentwire_approval::{
    ApprovalEvent, ApprovalId, ApprovalSnapshot, Approvals, RendererEvent, Resolution,
};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

/// Longest line either side may send, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most approver connections at once.
pub const MAX_CONNECTIONS: usize = 4;

/// Why the approver socket could not be opened.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    /// Something other than a stale socket of ours is at the path.
    #[error("{} exists and is not a stale socket; remove it or pick another path", path.display())]
    PathInUse {
        /// The path.
        path: PathBuf,
    },
    /// A live process already listens there.
    #[error("another process listens on {}", path.display())]
    AlreadyListening {
        /// The path.
        path: PathBuf,
    },
    /// IO failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A bound approver socket and its credential file.
#[derive(Debug)]
pub struct ApproverSocket {
    listener: UnixListener,
    path: PathBuf,
    token_path: PathBuf,
    token: String,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ApproverError {
    let path = path.to_path_buf();
    move |source| ApproverError::Io { what, path, source }
}

impl ApproverSocket {
    /// Binds `path` (0600; a stale socket left by a crash is replaced, anything else is refused) and writes the
    /// credential to `PATH.token` (0600).
    ///
    /// # Errors
    /// [`ApproverError`].
    pub async fn bind(path: &Path) -> Result<ApproverSocket, ApproverError> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(ApproverError::PathInUse {
                    path: path.to_path_buf(),
                });
            }
            if UnixStream::connect(path).await.is_ok() {
                return Err(ApproverError::AlreadyListening {
                    path: path.to_path_buf(),
                });
            }
            std::fs::remove_file(path).map_err(io("removing the stale socket", path))?;
        }
        let listener = UnixListener::bind(path).map_err(io("binding", path))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io("restricting", path))?;
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| {
            io("generating the token for", path)(std::io::Error::other(e.to_string()))
        })?;
        use base64::Engine as _;
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let mut token_path = path.as_os_str().to_owned();
        token_path.push(".token");
        let token_path = PathBuf::from(token_path);
        write_private(&token_path, token.as_bytes()).map_err(io("writing", &token_path))?;
        Ok(ApproverSocket {
            listener,
            path: path.to_path_buf(),
            token_path,
            token,
        })
    }

    /// The credential file's path.
    pub fn token_path(&self) -> &Path {
        &self.token_path
    }

    /// Serves approvers until `shutdown` fires, then removes the socket and the token file.
    pub async fn serve(self, approvals: Approvals, shutdown: CancellationToken) {
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                () = shutdown.cancelled() => break,
            };
            let Ok((stream, _)) = accepted else { continue };
            let same_user = stream
                .peer_cred()
                .is_ok_and(|cred| cred.uid() == rustix::process::getuid().as_raw());
            let Ok(permit) = std::sync::Arc::clone(&slots).try_acquire_owned() else {
                continue;
            };
            if !same_user {
                continue;
            }
            let approvals = approvals.clone();
            let token = self.token.clone();
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                let _permit = permit;
                tokio::select! {
                    () = serve_one(stream, approvals, &token) => {}
                    () = shutdown.cancelled() => {}
                }
            });
        }
        tasks.shutdown().await;
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.token_path);
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".approver-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The JSON line shown to the approver for `approval`.
pub fn approval_line(approval: &ApprovalSnapshot, now: Instant) -> Value {
    json!({
        "type": "approval",
        "id": approval.id.to_string(),
        "scope": approval.scope,
        "method": approval.method,
        "display": approval.display,
        "expiresInMs": u64::try_from(approval.expires_at.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX),
    })
}

async fn serve_one(stream: UnixStream, approvals: Approvals, token: &str) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    let Some(hello) = read_line(&mut lines).await else {
        return;
    };
    let presented = hello
        .get("token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let token_ok = hello.get("type").and_then(Value::as_str) == Some("hello")
        && bool::from(presented.as_bytes().ct_eq(token.as_bytes()));
    if !token_ok {
        let _ = send(
            &mut write,
            &json!({"type":"error","code":"authentication_failed"}),
        )
        .await;
        return;
    }
    let mut renderer = approvals.attach_renderer();
    if send(&mut write, &json!({"type":"ready"})).await.is_err() {
        return;
    }
    let now = Instant::now();
    for approval in renderer.pending() {
        if send(&mut write, &approval_line(&approval, now))
            .await
            .is_err()
        {
            return;
        }
    }
    loop {
        tokio::select! {
            event = renderer.next_event() => {
                let line = match event {
                    None => return,
                    Some(RendererEvent::Approval(ApprovalEvent::Created(approval))) => {
                        approval_line(&approval, Instant::now())
                    }
                    Some(RendererEvent::Approval(ApprovalEvent::Decided { id, decision, .. })) => {
                        json!({"type":"closed","id": id.to_string(), "decision": decision.code()})
                    }
                    Some(RendererEvent::Lagged { .. }) => {
                        // Re-send what is pending; the approver dedups by id.
                        let now = Instant::now();
                        let mut failed = false;
                        for approval in renderer.pending() {
                            failed |= send(&mut write, &approval_line(&approval, now)).await.is_err();
                        }
                        if failed { return; }
                        continue;
                    }
                    Some(_) => continue,
                };
                if send(&mut write, &line).await.is_err() {
                    return;
                }
            }
            line = read_line(&mut lines) => {
                let Some(line) = line else { return };
                let answer = resolve(&renderer, &line);
                if send(&mut write, &answer).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn resolve(renderer: &agentwire_approval::Renderer, line: &Value) -> Value {
    let id_text = line.get("id").and_then(Value::as_str).unwrap_or_default();
    let fail = |code: &str| json!({"type":"error","id": id_text, "code": code});
    if line.get("type").and_then(Value::as_str) != Some("resolve") {
        return fail("invalid_request");
    }
    let resolution = match line.get("decision").and_then(Value::as_str) {
        Some("allow") => Resolution::Approve,
        Some("deny") => Resolution::Deny,
        _ => return fail("invalid_request"),
    };
    let Some(id) = ApprovalId::parse(id_text) else {
        return fail("not_found");
    };
    let Some(approval) = renderer.pending().into_iter().find(|a| a.id == id) else {
        return fail("not_found");
    };
    match renderer.resolve(id, &approval.scope, resolution) {
        Ok(()) => json!({"type":"resolved","id": id_text}),
        Err(e) => fail(e.code()),
    }
}

/// Reads one bounded JSON line; `None` at EOF, on an over-long line or on invalid JSON (the connection ends).
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R) -> Option<Value> {
    let mut buf = Vec::new();
    loop {
        let available = reader.fill_buf().await.ok()?;
        if available.is_empty() {
            return None;
        }
        let (take, done) = match memchr_newline(available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if buf.len() + take > MAX_LINE_BYTES + 1 {
            return None;
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(take);
        if done {
            return serde_json::from_slice(&buf).ok();
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == b'\n')
}

async fn send<W: tokio::io::AsyncWrite + Unpin>(
    write: &mut W,
    line: &Value,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(line).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    write.write_all(&bytes).await
}
