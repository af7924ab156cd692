//! The discovery descriptor: what the host writes and what a client checks before connecting.
//!
//! Shape (DeepChat `LocalControlDescriptorSchema`, strict):
//!
//! ```json
//! {"protocolVersion":1,"surfaceVersion":2,"appVersion":"0.1.0","endpoint":{"kind":"unix","path":"/…/control.sock"},
//!  "pid":4242,"token":"<43 base64url chars>","startedAt":1764583200000}
//! ```
//!
//! Written by [`write_descriptor`] atomically (temp file 0600 created exclusively, fsync, rename, directory fsync);
//! removed by [`remove_descriptor_if_ours`] only while it still holds our token. Read by [`discover`] with every
//! check of DeepChat's `src/cli/discovery.ts`. Blocking `std::fs` calls: the files are tiny.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::ErrorCode;
use crate::limits::{
    CONTROL_DIR_NAME, DESCRIPTOR_FILENAME, MAX_DESCRIPTOR_BYTES, MAX_SOCKET_PATH_BYTES,
    PROTOCOL_VERSION, SURFACE_VERSION,
};

/// A bearer token: 43..=256 base64url characters. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Token(String);

impl Token {
    /// A fresh token of 32 random bytes (256 bits), base64url without padding: 43 characters.
    ///
    /// # Errors
    /// The OS random source failed.
    pub fn generate() -> io::Result<Token> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|error| io::Error::other(error.to_string()))?;
        Ok(Token(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        ))
    }

    /// Accepts `^[A-Za-z0-9_-]{43,256}$` (DeepChat's `LocalControlTokenSchema`).
    pub fn parse(text: &str) -> Option<Token> {
        let ok = (43..=256).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        ok.then(|| Token(text.to_owned()))
    }

    /// The secret text; do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

impl TryFrom<String> for Token {
    type Error = &'static str;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Token::parse(&text).ok_or("token is invalid")
    }
}

impl From<Token> for String {
    fn from(token: Token) -> String {
        token.0
    }
}

/// Where the server listens: `{"kind":"unix","path":…}` or `{"kind":"pipe","name":…}` (Windows; not served by
/// this crate yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
#[non_exhaustive]
pub enum Endpoint {
    /// A Unix socket path (1..=4096 bytes, no NUL).
    Unix {
        /// Absolute socket path.
        path: String,
    },
    /// A Windows named pipe (1..=1024 bytes, no NUL).
    Pipe {
        /// `\\.\pipe\…`.
        name: String,
    },
}

/// The descriptor file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Descriptor {
    /// Always 1.
    pub protocol_version: u32,
    /// The surface version the host serves.
    pub surface_version: u32,
    /// Host version, 1..=128 chars.
    pub app_version: String,
    /// Where to connect.
    pub endpoint: Endpoint,
    /// Host pid, 1..=2^31-1.
    pub pid: u32,
    /// Human bearer token, rotated every start.
    pub token: Token,
    /// Unix time of the start in milliseconds.
    pub started_at: u64,
}

impl Descriptor {
    /// A descriptor of this build's versions.
    pub fn new(
        app_version: impl Into<String>,
        endpoint: Endpoint,
        pid: u32,
        token: Token,
        started_at: u64,
    ) -> Self {
        Descriptor {
            protocol_version: PROTOCOL_VERSION,
            surface_version: SURFACE_VERSION,
            app_version: app_version.into(),
            endpoint,
            pid,
            token,
            started_at,
        }
    }

    fn has_valid_fields(&self) -> bool {
        let endpoint_ok = match &self.endpoint {
            Endpoint::Unix { path } => (1..=4096).contains(&path.len()) && !path.contains('\0'),
            Endpoint::Pipe { name } => (1..=1024).contains(&name.len()) && !name.contains('\0'),
        };
        endpoint_ok
            && (1..=128).contains(&self.app_version.len())
            && (1..=2_147_483_647).contains(&self.pid)
    }
}

/// `<data_dir>/local-control/local-control.json`.
pub fn descriptor_path(data_dir: &Path) -> PathBuf {
    data_dir.join(CONTROL_DIR_NAME).join(DESCRIPTOR_FILENAME)
}

/// Writes `descriptor` to `path` atomically: a `0600` temp file created exclusively beside it, fsync, rename over
/// `path`, fsync of the directory.
///
/// # Errors
/// Any IO failure; the temp file is removed.
pub fn write_descriptor(path: &Path, descriptor: &Descriptor) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("descriptor path has no parent"))?;
    let mut suffix = [0u8; 12];
    getrandom::fill(&mut suffix).map_err(|error| io::Error::other(error.to_string()))?;
    let temp = dir.join(format!(
        ".descriptor-{}.tmp",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(suffix)
    ));
    let mut text = serde_json::to_vec(descriptor).map_err(io::Error::other)?;
    text.push(b'\n');
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Removes the descriptor at `path` if it still holds `token`; returns whether it did.
/// A descriptor of another start (or an unreadable one) is left in place.
///
/// # Errors
/// IO failures other than "not found".
pub fn remove_descriptor_if_ours(path: &Path, token: &Token) -> io::Result<bool> {
    let text = match fs::read(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(error),
    };
    let ours =
        serde_json::from_slice::<Descriptor>(&text).is_ok_and(|current| current.token == *token);
    if ours {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(error),
        }
    }
    Ok(ours)
}

/// Why discovery refused a descriptor. Each message says what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// No descriptor file.
    #[error("the host is not running (no descriptor at {path}); start it with `awp-host serve`")]
    NotRunning {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// lstat/read failed.
    #[error(
        "cannot read the descriptor at {path}: {reason}; check the data directory's permissions"
    )]
    Unreadable {
        /// The descriptor path.
        path: PathBuf,
        /// The OS error text.
        reason: String,
    },
    /// A symlink sits where the descriptor should be.
    #[error("the descriptor at {path} is a symlink; remove it and restart the host")]
    Symlink {
        /// The descriptor path.
        path: PathBuf,
    },
    /// Not a regular file.
    #[error("the descriptor at {path} is not a regular file; remove it and restart the host")]
    NotRegular {
        /// The descriptor path.
        path: PathBuf,
    },
    /// Empty or larger than 64 KiB.
    #[error(
        "the descriptor at {path} has an invalid size ({size} bytes, limit 65536); restart the host"
    )]
    BadSize {
        /// The descriptor path.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// Owned by another uid.
    #[error(
        "the descriptor at {path} is owned by uid {owner}, not by you (uid {me}); run as the host's user"
    )]
    OtherOwner {
        /// The descriptor path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our uid.
        me: u32,
    },
    /// Group/other permission bits set.
    #[error(
        "the descriptor at {path} has mode {mode:04o}, readable by others; restart the host to rewrite it (0600)"
    )]
    NotPrivate {
        /// The descriptor path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Not JSON or not an object, or no numeric versions.
    #[error("the descriptor at {path} is malformed ({reason}); restart the host")]
    Malformed {
        /// The descriptor path.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// Versions other than this build's.
    #[error(
        "the host speaks protocol {protocol} surface {surface}, this client needs protocol {PROTOCOL_VERSION} \
         surface {SURFACE_VERSION}; use the client shipped with the host"
    )]
    UnsupportedVersion {
        /// The descriptor's protocolVersion.
        protocol: u64,
        /// The descriptor's surfaceVersion.
        surface: u64,
    },
    /// The pid is not running.
    #[error(
        "the descriptor points to process {pid}, which is not running (stale after a crash); start the host"
    )]
    DeadProcess {
        /// The descriptor's pid.
        pid: u32,
    },
    /// Not a Unix endpoint, not absolute, or over 100 bytes.
    #[error(
        "the descriptor's endpoint is not a usable Unix socket path ({reason}); restart the host"
    )]
    BadEndpoint {
        /// What is wrong.
        reason: &'static str,
    },
    /// The endpoint path is missing, not a socket, foreign or not private.
    #[error("the endpoint {path} {reason}; restart the host")]
    EndpointNotSocket {
        /// The socket path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl DiscoveryError {
    /// The protocol error code a client reports: `unsupported_version` for a version mismatch, else `unavailable`
    /// (CLI exit 3 either way).
    pub fn code(&self) -> ErrorCode {
        match self {
            DiscoveryError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            _ => ErrorCode::Unavailable,
        }
    }

    /// A stable snake_case name of the failed check, for `doctor` output and tests.
    pub fn check(&self) -> &'static str {
        match self {
            DiscoveryError::NotRunning { .. } => "descriptor_missing",
            DiscoveryError::Unreadable { .. } => "descriptor_unreadable",
            DiscoveryError::Symlink { .. } => "descriptor_symlink",
            DiscoveryError::NotRegular { .. } => "descriptor_not_regular",
            DiscoveryError::BadSize { .. } => "descriptor_size",
            DiscoveryError::OtherOwner { .. } => "descriptor_owner",
            DiscoveryError::NotPrivate { .. } => "descriptor_mode",
            DiscoveryError::Malformed { .. } => "descriptor_malformed",
            DiscoveryError::UnsupportedVersion { .. } => "unsupported_version",
            DiscoveryError::DeadProcess { .. } => "process_dead",
            DiscoveryError::BadEndpoint { .. } => "endpoint_invalid",
            DiscoveryError::EndpointNotSocket { .. } => "endpoint_not_socket",
        }
    }
}

/// Options of [`discover_at`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct DiscoveryOptions {
    /// Decides whether a pid is alive. Default: `kill(pid, 0)` (EPERM counts as alive).
    pub process_alive: fn(u32) -> bool,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        DiscoveryOptions { process_alive }
    }
}

/// `kill(pid, 0)`: alive unless the OS says no such process.
pub fn process_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    let Some(pid) = rustix::process::Pid::from_raw(raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(error) => error != rustix::io::Errno::SRCH,
    }
}

/// Finds and checks the descriptor of the host using `data_dir`.
///
/// # Errors
/// See [`discover_at`].
pub fn discover(data_dir: &Path) -> Result<Descriptor, DiscoveryError> {
    discover_at(&descriptor_path(data_dir), DiscoveryOptions::default())
}

/// Reads and checks the descriptor at `path`, in this order: lstat (missing → [`DiscoveryError::NotRunning`]),
/// symlink, regular file, size 1..=64 KiB, owner = our uid, no group/other mode bits, JSON object, numeric
/// versions equal to ours (before the full shape), full strict shape, pid alive, Unix endpoint that is absolute
/// and ≤ 100 bytes, and the endpoint an owner-only socket of ours.
///
/// # Errors
/// The first failed check, as a [`DiscoveryError`].
pub fn discover_at(path: &Path, options: DiscoveryOptions) -> Result<Descriptor, DiscoveryError> {
    let unreadable = |error: io::Error| DiscoveryError::Unreadable {
        path: path.to_owned(),
        reason: error.to_string(),
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(DiscoveryError::NotRunning {
                path: path.to_owned(),
            });
        }
        Err(error) => return Err(unreadable(error)),
    };
    if meta.file_type().is_symlink() {
        return Err(DiscoveryError::Symlink {
            path: path.to_owned(),
        });
    }
    if !meta.file_type().is_file() {
        return Err(DiscoveryError::NotRegular {
            path: path.to_owned(),
        });
    }
    if meta.len() == 0 || meta.len() > MAX_DESCRIPTOR_BYTES {
        return Err(DiscoveryError::BadSize {
            path: path.to_owned(),
            size: meta.len(),
        });
    }
    let me = rustix::process::getuid().as_raw();
    if meta.uid() != me {
        return Err(DiscoveryError::OtherOwner {
            path: path.to_owned(),
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(DiscoveryError::NotPrivate {
            path: path.to_owned(),
            mode: meta.mode() & 0o7777,
        });
    }
    // O_NOFOLLOW closes the window between the lstat and the open; the read is bounded again.
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(unreadable)?;
    let mut text = Vec::new();
    Read::by_ref(&mut file)
        .take(MAX_DESCRIPTOR_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_DESCRIPTOR_BYTES {
        return Err(DiscoveryError::BadSize {
            path: path.to_owned(),
            size: text.len() as u64,
        });
    }
    let malformed = |reason| DiscoveryError::Malformed {
        path: path.to_owned(),
        reason,
    };
    let value: Value = serde_json::from_slice(&text).map_err(|_| malformed("not json"))?;
    let object = value
        .as_object()
        .ok_or_else(|| malformed("not a json object"))?;
    let (Some(protocol), Some(surface)) = (
        object.get("protocolVersion").and_then(Value::as_u64),
        object.get("surfaceVersion").and_then(Value::as_u64),
    ) else {
        return Err(malformed("no valid protocol version"));
    };
    if protocol != u64::from(PROTOCOL_VERSION) || surface != u64::from(SURFACE_VERSION) {
        return Err(DiscoveryError::UnsupportedVersion { protocol, surface });
    }
    let descriptor: Descriptor =
        serde_json::from_value(value).map_err(|_| malformed("fields do not match the schema"))?;
    if !descriptor.has_valid_fields() {
        return Err(malformed("a field is out of range"));
    }
    if !(options.process_alive)(descriptor.pid) {
        return Err(DiscoveryError::DeadProcess {
            pid: descriptor.pid,
        });
    }
    let Endpoint::Unix { path: socket } = &descriptor.endpoint else {
        return Err(DiscoveryError::BadEndpoint {
            reason: "not a unix socket",
        });
    };
    if !socket.starts_with('/') {
        return Err(DiscoveryError::BadEndpoint {
            reason: "path is not absolute",
        });
    }
    if socket.len() > MAX_SOCKET_PATH_BYTES {
        return Err(DiscoveryError::BadEndpoint {
            reason: "path is longer than 100 bytes",
        });
    }
    let socket = PathBuf::from(socket);
    let not_socket = |reason: String| DiscoveryError::EndpointNotSocket {
        path: socket.clone(),
        reason,
    };
    let meta = fs::symlink_metadata(&socket)
        .map_err(|error| not_socket(format!("cannot be inspected ({error})")))?;
    if !meta.file_type().is_socket() {
        return Err(not_socket("is not a socket".to_owned()));
    }
    if meta.uid() != me {
        return Err(not_socket(format!(
            "is owned by uid {}, not by you",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(not_socket(format!(
            "has mode {:04o}, accessible to others",
            meta.mode() & 0o7777
        )));
    }
    Ok(descriptor)
}
