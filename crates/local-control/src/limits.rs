//! Protocol constants and the server's resource limits.
//!
//! Values are DeepChat's (`src/shared/contracts/localControl.ts`, `src/main/cli/server.ts`,
//! `src/cli/discovery.ts`), restated in `protocols/local-control.md` of this repository's notes.

use std::time::Duration;

/// `protocolVersion` of every descriptor, envelope and stream record.
pub const PROTOCOL_VERSION: u32 = 1;
/// `surfaceVersion` this build speaks (DeepChat's `CLI_SURFACE_V2`).
pub const SURFACE_VERSION: u32 = 2;

/// File name of the descriptor inside `<data_dir>/local-control/`.
pub const DESCRIPTOR_FILENAME: &str = "local-control.json";
/// Name of the control directory below the data dir.
pub const CONTROL_DIR_NAME: &str = "local-control";
/// File name of the Unix socket.
pub const SOCKET_FILENAME: &str = "control.sock";
/// File name of the lock file that serializes probe → unlink → bind (ours; DeepChat has none).
pub const LOCK_FILENAME: &str = "control.lock";

/// Unary JSON requests.
pub const RPC_PATH: &str = "/v1/rpc";
/// Streamed requests (NDJSON response).
pub const STREAM_PATH: &str = "/v1/stream";
/// Byte-input requests.
pub const UPLOAD_PATH: &str = "/v1/upload";
/// Prefix of artifact downloads, followed by the artifact id.
pub const ARTIFACT_PATH_PREFIX: &str = "/v1/artifacts/";

/// Singular header naming the method of an rpc/stream request; must equal the body's `method`.
pub const METHOD_HEADER: &str = "x-deepchat-method";
/// Singular header carrying an upload's request envelope as canonical base64url.
pub const UPLOAD_REQUEST_HEADER: &str = "x-deepchat-upload-request";
/// Artifact id header of a download response.
pub const ARTIFACT_ID_HEADER: &str = "x-deepchat-artifact-id";
/// Hex SHA-256 header of a download response.
pub const CONTENT_SHA256_HEADER: &str = "x-content-sha256";
/// Environment variable holding a scoped agent token; when present it is the only token the CLI may use.
pub const AGENT_TOKEN_ENV: &str = "DEEPCHAT_CLI_AGENT_TOKEN";

/// Largest descriptor file a client reads: 64 KiB.
pub const MAX_DESCRIPTOR_BYTES: u64 = 64 * 1024;
/// Longest Unix socket path, in bytes (portable below `sun_path`'s 104/108).
pub const MAX_SOCKET_PATH_BYTES: usize = 100;
/// Largest JSON response body (rpc and error responses): 16 MiB.
pub const MAX_JSON_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Largest NDJSON stream record, newline included: 20 MiB.
pub const MAX_STREAM_RECORD_BYTES: usize = 20 * 1024 * 1024;
/// Largest `x-deepchat-upload-request` header value: 4 KiB.
pub const MAX_UPLOAD_REQUEST_HEADER_BYTES: usize = 4 * 1024;
/// Longest error message in an envelope, in bytes (longer ones are cut on a char boundary).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;
/// Longest request a method may declare: 30 min.
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Server resource limits. Every field is enforced; `Default` gives DeepChat's values.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerLimits {
    /// Largest request head (request line + headers), bytes. Default 8 KiB. Over → 431 and the connection closes.
    pub max_header_bytes: usize,
    /// Open connections at once. Default 64. Connections past it are closed right after accept.
    pub max_connections: usize,
    /// Requests being served at once, all connections together. Default 64. Over → 429 `rate_limited`.
    pub max_pending_requests: usize,
    /// Requests being served at once on one connection. Default 8. Over → 429 `rate_limited`.
    pub max_pending_per_connection: usize,
    /// Time allowed to receive a request head. Default 10 s; then the connection is closed.
    pub header_read_timeout: Duration,
    /// Time in-flight requests get after shutdown starts before their connections are dropped. Default 2 s.
    pub shutdown_grace: Duration,
    /// Largest JSON request value shape (depth/keys/nodes). Default [`crate::json_limits::JsonLimits::default`].
    pub json: crate::json_limits::JsonLimits,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_header_bytes: 8 * 1024,
            max_connections: 64,
            max_pending_requests: 64,
            max_pending_per_connection: 8,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(2),
            json: crate::json_limits::JsonLimits::default(),
        }
    }
}
