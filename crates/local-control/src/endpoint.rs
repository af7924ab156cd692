//! The Unix-socket endpoint: private directories, stale-socket handling, bind, permission check.
//!
//! Layout (DeepChat `src/main/cli/descriptor.ts`): `<data_dir>/local-control/` (0700) holds the descriptor, the
//! lock file and `tmp/` (0700, upload spill files); the socket is `<data_dir>/local-control/control.sock` unless
//! that path exceeds 100 bytes, then `$XDG_RUNTIME_DIR` (else the temp dir) `/<app>-<uid>-<16 hex of
//! SHA-256(data_dir)>/control.sock`, also 0700.
//!
//! Binding ([`bind_endpoint`]) is serialized by an exclusive `flock` on `control.lock`, held for the server's
//! lifetime: a second starter fails at once with [`EndpointError::AlreadyRunning`]. Under the lock, an existing
//! socket is probed with `connect`: an answer means another host serves it (`already_running`); a refused
//! connection on a socket owned by us is stale and unlinked; anything that is not a socket is never touched.
//! After `bind` the socket is chmod 0600, then lstat-ed and its type, owner and mode re-checked. The kernel
//! creates the socket with the process umask, so it may be briefly group/other-accessible before the chmod; the
//! enclosing 0700 directory is what closes that window. Windows named pipes are not built.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::envelope::ErrorCode;
use crate::limits::{
    CONTROL_DIR_NAME, DESCRIPTOR_FILENAME, LOCK_FILENAME, MAX_SOCKET_PATH_BYTES, SOCKET_FILENAME,
};

/// Where everything of one data dir lives.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Layout {
    /// `<data_dir>/local-control`.
    pub control_dir: PathBuf,
    /// `<control_dir>/local-control.json`.
    pub descriptor_path: PathBuf,
    /// `<control_dir>/control.lock`.
    pub lock_path: PathBuf,
    /// `<control_dir>/tmp`: upload spill files.
    pub temp_dir: PathBuf,
    /// The socket's directory (`control_dir`, or the fallback directory).
    pub socket_dir: PathBuf,
    /// The socket path, ≤ 100 bytes.
    pub socket_path: PathBuf,
}

impl Layout {
    /// The layout for `data_dir`; `app` names the fallback directory (e.g. `"deepchat"`).
    ///
    /// # Errors
    /// [`EndpointError::PathTooLong`] when neither the preferred path nor any fallback fits in 100 bytes.
    pub fn new(data_dir: &Path, app: &str) -> Result<Layout, EndpointError> {
        let control_dir = data_dir.join(CONTROL_DIR_NAME);
        let preferred = control_dir.join(SOCKET_FILENAME);
        let (socket_dir, socket_path) = if preferred.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
            (control_dir.clone(), preferred)
        } else {
            let digest = Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
            let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
            let name = format!("{app}-{}-{hash}", rustix::process::getuid().as_raw());
            let bases = [
                std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
                Some(std::env::temp_dir()),
                Some("/tmp".into()),
            ];
            bases
                .into_iter()
                .flatten()
                .filter(|base| base.is_absolute())
                .map(|base| base.join(&name))
                .map(|dir| {
                    let socket = dir.join(SOCKET_FILENAME);
                    (dir, socket)
                })
                .find(|(_, socket)| socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES)
                .ok_or(EndpointError::PathTooLong)?
        };
        Ok(Layout {
            descriptor_path: control_dir.join(DESCRIPTOR_FILENAME),
            lock_path: control_dir.join(LOCK_FILENAME),
            temp_dir: control_dir.join("tmp"),
            control_dir,
            socket_dir,
            socket_path,
        })
    }
}

/// Why the endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// Another host holds the lock or answers on the socket.
    #[error("another host is already serving this data directory")]
    AlreadyRunning,
    /// A directory is not a real directory, not ours, or not private after chmod.
    #[error("directory {path} is not private: {reason}")]
    DirectoryNotPrivate {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Something other than a socket sits at the socket path; it is never replaced.
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// A stale socket owned by another user.
    #[error("stale socket {path} belongs to another user; refusing to remove it")]
    ForeignSocket {
        /// The path.
        path: PathBuf,
    },
    /// The bound socket failed the post-bind check.
    #[error("socket {path} failed verification after bind: {reason}")]
    Unverified {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No socket path of at most 100 bytes could be found.
    #[error("no private socket path of at most 100 bytes is available")]
    PathTooLong,
    /// Other IO.
    #[error("local-control endpoint io failed: {0}")]
    Io(#[from] io::Error),
}

impl EndpointError {
    /// A stable snake_case code (`already_running`, `directory_not_private`, `not_a_socket`, `foreign_socket`,
    /// `socket_unverified`, `path_too_long`, `io`).
    pub fn code(&self) -> &'static str {
        match self {
            EndpointError::AlreadyRunning => "already_running",
            EndpointError::DirectoryNotPrivate { .. } => "directory_not_private",
            EndpointError::NotASocket { .. } => "not_a_socket",
            EndpointError::ForeignSocket { .. } => "foreign_socket",
            EndpointError::Unverified { .. } => "socket_unverified",
            EndpointError::PathTooLong => "path_too_long",
            EndpointError::Io(_) => "io",
        }
    }

    /// The protocol code a client-facing report would use: always `unavailable`.
    pub fn error_code(&self) -> ErrorCode {
        ErrorCode::Unavailable
    }
}

/// Creates `dir` (and parents) with mode 0700 and checks it: a real directory (not a symlink), owned by us,
/// chmod 0700, then no group/other bits.
///
/// # Errors
/// [`EndpointError::DirectoryNotPrivate`] or IO.
pub fn prepare_private_dir(dir: &Path) -> Result<(), EndpointError> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let not_private = |reason: String| EndpointError::DirectoryNotPrivate {
        path: dir.to_owned(),
        reason,
    };
    let meta = fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() {
        return Err(not_private("not a directory".to_owned()));
    }
    let me = rustix::process::getuid().as_raw();
    if meta.uid() != me {
        return Err(not_private(format!("owned by uid {}", meta.uid())));
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    let meta = fs::symlink_metadata(dir)?;
    if meta.mode() & 0o077 != 0 {
        return Err(not_private(format!("mode {:04o}", meta.mode() & 0o7777)));
    }
    Ok(())
}

/// A bound, verified socket and the lock that makes it ours. Dropping it releases the lock (not the socket
/// file; [`EndpointLock::remove_socket`] does that).
#[derive(Debug)]
pub struct BoundEndpoint {
    /// The listener, non-blocking.
    pub listener: UnixListener,
    /// The layout it was bound for.
    pub layout: Layout,
    lock: File,
}

impl BoundEndpoint {
    /// Splits into the listener and the lock guard, so that the listener can be closed (by dropping it) while
    /// the lock is still held.
    pub fn into_parts(self) -> (UnixListener, EndpointLock) {
        (
            self.listener,
            EndpointLock {
                layout: self.layout,
                lock: self.lock,
            },
        )
    }
}

/// The lock of a bound endpoint, held while the server lives; dropping it releases the lock.
#[derive(Debug)]
pub struct EndpointLock {
    /// The layout it was bound for.
    pub layout: Layout,
    lock: File,
}

impl EndpointLock {
    /// Unlinks the socket file if it is still a socket (and the fallback directory if empty).
    pub fn remove_socket(&self) {
        if fs::symlink_metadata(&self.layout.socket_path)
            .is_ok_and(|meta| meta.file_type().is_socket())
        {
            let _ = fs::remove_file(&self.layout.socket_path);
        }
        if self.layout.socket_dir != self.layout.control_dir {
            let _ = fs::remove_dir(&self.layout.socket_dir);
        }
        let _ = &self.lock;
    }
}

/// Prepares the directories, takes the lock, clears a stale socket, binds, chmods 0600 and verifies.
/// Also removes leftover `upload-*.tmp` files of an earlier start from `tmp/`.
///
/// # Errors
/// [`EndpointError::AlreadyRunning`] when another process holds the lock or answers on the socket; the other
/// variants as documented on them.
pub fn bind_endpoint(layout: &Layout) -> Result<BoundEndpoint, EndpointError> {
    prepare_private_dir(&layout.control_dir)?;
    prepare_private_dir(&layout.temp_dir)?;
    if layout.socket_dir != layout.control_dir {
        prepare_private_dir(&layout.socket_dir)?;
    }
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&layout.lock_path)?;
    match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Err(EndpointError::AlreadyRunning),
        Err(error) => return Err(EndpointError::Io(error.into())),
    }
    for entry in fs::read_dir(&layout.temp_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("upload-") && name.ends_with(".tmp") && entry.file_type()?.is_file() {
            let _ = fs::remove_file(entry.path());
        }
    }
    clear_stale_socket(&layout.socket_path)?;
    let listener = UnixListener::bind(&layout.socket_path).map_err(|error| {
        if error.kind() == io::ErrorKind::AddrInUse {
            EndpointError::AlreadyRunning
        } else {
            error.into()
        }
    })?;
    let path = &layout.socket_path;
    let unverified = |reason: String| EndpointError::Unverified {
        path: path.clone(),
        reason,
    };
    let verify = || -> Result<(), EndpointError> {
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
        let meta = fs::symlink_metadata(path)?;
        if !meta.file_type().is_socket() {
            return Err(unverified("not a socket".to_owned()));
        }
        if meta.uid() != rustix::process::getuid().as_raw() {
            return Err(unverified(format!("owned by uid {}", meta.uid())));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(unverified(format!("mode {:04o}", meta.mode() & 0o7777)));
        }
        Ok(())
    };
    if let Err(error) = verify() {
        drop(listener);
        let _ = fs::remove_file(path);
        return Err(error);
    }
    listener.set_nonblocking(true)?;
    Ok(BoundEndpoint {
        listener,
        layout: layout.clone(),
        lock,
    })
}

fn clear_stale_socket(path: &Path) -> Result<(), EndpointError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error.into()),
    };
    if !meta.file_type().is_socket() {
        return Err(EndpointError::NotASocket {
            path: path.to_owned(),
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(EndpointError::AlreadyRunning),
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
            if meta.uid() != rustix::process::getuid().as_raw() {
                return Err(EndpointError::ForeignSocket {
                    path: path.to_owned(),
                });
            }
            fs::remove_file(path)?;
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}
