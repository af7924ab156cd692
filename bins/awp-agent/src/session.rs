//! Native session history: one JSON file per session id, private, atomically replaced, bounded.
//!
//! Layout: `<dir>/<id>.json` (ids longer than [`MAX_PLAIN_FILE_ID_BYTES`] use a shortened name plus a
//! hash; the file keeps the full id and is checked on load). The directory is created `0700`; files are
//! written `0600` to a temporary file in the same directory, fsynced, renamed over the old file, and the
//! directory is fsynced, so a crash leaves either the old or the new history, never half of one.
//!
//! File shape: `{"version":1,"session_id":"awp-…","messages":[{"role":"user","content":"hi"},…],"turns":1}`
//! (`turns` absent in older files).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Ids up to this length are stored as `<id>.json`; longer ones as `<first 200 bytes>~<fnv64 hex>.json`
/// (file names are limited to 255 bytes).
pub const MAX_PLAIN_FILE_ID_BYTES: usize = 200;

/// Version written into session files; files of another version are refused (`session_store_failed`).
const FILE_VERSION: u32 = 1;

/// Bounds of one session's stored history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Most messages kept (user and assistant each count one). Default 100.
    /// On overflow the oldest messages are dropped before saving.
    pub max_messages: usize,
    /// Largest session file, in bytes of JSON. Default 4 MiB (4 194 304).
    /// On overflow the oldest messages are dropped until the file fits (if even the newest message alone
    /// does not fit, the history is saved empty and a warning goes to stderr). A new user message is checked
    /// first with [`SessionStore::check_fits`]: one that does not fit alone is refused (`message_too_large`),
    /// never stored or sent.
    pub max_file_bytes: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_messages: 100,
            max_file_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human, through the host.
    User,
    /// This agent's provider.
    Assistant,
}

/// One stored message: `{"role":"user","content":"hi"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: Role,
    /// The text (images are stored as a `[image: image/png]` placeholder).
    pub content: String,
}

/// A loaded session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The session id, valid per [`is_valid_session_id`].
    pub id: String,
    /// History, oldest first.
    pub messages: Vec<Message>,
    /// Turns started in this session (never decreases when old messages are dropped): the turn number of the
    /// managed-task idempotency key.
    pub turns: u64,
}

#[derive(Serialize, Deserialize)]
struct SessionFile {
    version: u32,
    session_id: String,
    messages: Vec<Message>,
    /// Absent in files written before managed tasks: then the number of user messages.
    #[serde(default)]
    turns: u64,
}

/// Why the session store failed. Crosses the process boundary as the turn's `result` code.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Neither `AWP_AGENT_SESSION_DIR`, `XDG_STATE_HOME` nor `HOME` is set.
    #[error("no session directory: set AWP_AGENT_SESSION_DIR, XDG_STATE_HOME or HOME")]
    NoDirectory,
    /// The session directory is accessible to group or others.
    #[error("session directory is accessible to other users")]
    InsecureDirectory,
    /// Reading or writing failed.
    #[error("session store io failed: {0}")]
    Io(#[from] std::io::Error),
    /// The session file is not a version-1 session file for this id.
    #[error("session file is corrupt")]
    Corrupt,
}

impl SessionError {
    /// Stable machine-readable code: `session_dir_unavailable`, `session_dir_insecure`,
    /// `session_store_failed` or `session_file_corrupt`.
    pub fn code(&self) -> &'static str {
        match self {
            SessionError::NoDirectory => "session_dir_unavailable",
            SessionError::InsecureDirectory => "session_dir_insecure",
            SessionError::Io(_) => "session_store_failed",
            SessionError::Corrupt => "session_file_corrupt",
        }
    }
}

/// `true` when `id` matches `[A-Za-z0-9._:-]{1,256}` (the protocol's rule, as `agentwire_awp::SessionId` checks it).
pub fn is_valid_session_id(id: &str) -> bool {
    agentwire_awp::SessionId::new(id).is_ok()
}

/// A fresh session id: `awp-` + 32 lowercase hex digits (128 random bits from the OS).
///
/// # Errors
/// The OS random source failed.
pub fn new_session_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    let mut id = String::with_capacity(4 + 32);
    id.push_str("awp-");
    for byte in bytes {
        id.push_str(&format!("{byte:02x}"));
    }
    Ok(id)
}

/// A user message that cannot be stored even in an otherwise empty session file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the message needs {needed} bytes in the session file but a session file holds at most {limit} bytes; \
     shorten the message or attach less"
)]
pub struct MessageTooLarge {
    /// Bytes of the session file holding only this message (its JSON-escaped text plus the file's envelope).
    pub needed: usize,
    /// [`SessionLimits::max_file_bytes`].
    pub limit: usize,
}

impl MessageTooLarge {
    /// Stable machine-readable code: `message_too_large`.
    pub fn code(&self) -> &'static str {
        "message_too_large"
    }
}

/// Where sessions live and how large they may grow.
#[derive(Clone, Debug)]
pub struct SessionStore {
    dir: PathBuf,
    limits: SessionLimits,
}

impl SessionStore {
    /// The store in `$AWP_AGENT_SESSION_DIR`, else `$XDG_STATE_HOME/awp-agent/sessions`, else
    /// `$HOME/.local/state/awp-agent/sessions` (empty values count as unset).
    ///
    /// # Errors
    /// [`SessionError::NoDirectory`] when none of the three is set.
    pub fn from_vars(
        lookup: impl Fn(&str) -> Option<String>,
        limits: SessionLimits,
    ) -> Result<Self, SessionError> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let dir = if let Some(dir) = var("AWP_AGENT_SESSION_DIR") {
            PathBuf::from(dir)
        } else if let Some(state) = var("XDG_STATE_HOME") {
            Path::new(&state).join("awp-agent").join("sessions")
        } else if let Some(home) = var("HOME") {
            Path::new(&home)
                .join(".local")
                .join("state")
                .join("awp-agent")
                .join("sessions")
        } else {
            return Err(SessionError::NoDirectory);
        };
        Ok(Self { dir, limits })
    }

    fn file_path(&self, id: &str) -> PathBuf {
        if id.len() <= MAX_PLAIN_FILE_ID_BYTES {
            self.dir.join(format!("{id}.json"))
        } else {
            let prefix = id.get(..MAX_PLAIN_FILE_ID_BYTES).unwrap_or(id);
            self.dir
                .join(format!("{prefix}~{:016x}.json", fnv1a64(id.as_bytes())))
        }
    }

    /// Loads session `id`; a session that was never saved is empty.
    ///
    /// # Errors
    /// [`SessionError::Io`] when the file cannot be read, [`SessionError::Corrupt`] when it is not a
    /// version-1 session file for `id`.
    pub fn load(&self, id: &str) -> Result<Session, SessionError> {
        let bytes = match fs::read(self.file_path(id)) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Session {
                    id: id.to_owned(),
                    messages: Vec::new(),
                    turns: 0,
                });
            }
            Err(error) => return Err(error.into()),
        };
        let file: SessionFile =
            serde_json::from_slice(&bytes).map_err(|_| SessionError::Corrupt)?;
        if file.version != FILE_VERSION || file.session_id != id {
            return Err(SessionError::Corrupt);
        }
        let user_messages = file
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count() as u64;
        Ok(Session {
            id: id.to_owned(),
            turns: file.turns.max(user_messages),
            messages: file.messages,
        })
    }

    /// Checks that `message` fits [`SessionLimits::max_file_bytes`] on its own: the file of `session` holding
    /// only this message (with the turn count it will have) is at most the limit. Older messages may still be
    /// dropped to make room when saving; the new message is never dropped silently.
    ///
    /// # Errors
    /// [`MessageTooLarge`] with the needed and allowed byte counts.
    pub fn check_fits(&self, session: &Session, message: &Message) -> Result<(), MessageTooLarge> {
        let file = SessionFile {
            version: FILE_VERSION,
            session_id: session.id.clone(),
            messages: vec![message.clone()],
            turns: session.turns.saturating_add(1),
        };
        let needed = serde_json::to_vec(&file).map_or(usize::MAX, |bytes| bytes.len());
        let limit = self.limits.max_file_bytes;
        if needed > limit {
            return Err(MessageTooLarge { needed, limit });
        }
        Ok(())
    }

    /// Applies [`SessionLimits`] to `session` (dropping its oldest messages) and atomically replaces its file.
    ///
    /// # Errors
    /// [`SessionError::InsecureDirectory`] when the directory is group/other accessible,
    /// [`SessionError::Io`] for any failed filesystem step (the old file is then left intact).
    pub fn save(&self, session: &mut Session) -> Result<(), SessionError> {
        let bytes = self.bounded_bytes(session)?;
        self.ensure_dir()?;
        let path = self.file_path(&session.id);
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix)
            .map_err(|e| SessionError::Io(std::io::Error::other(e.to_string())))?;
        let tmp = self
            .dir
            .join(format!(".tmp-{:016x}.json", u64::from_le_bytes(suffix)));
        let written = write_private(&tmp, &bytes).and_then(|()| fs::rename(&tmp, &path));
        if let Err(error) = written {
            // Best effort: the temp file is ours and useless now; the error we report is the write's.
            if let Err(remove) = fs::remove_file(&tmp)
                && remove.kind() != std::io::ErrorKind::NotFound
            {
                eprintln!("awp-agent: could not remove temporary session file: {remove}");
            }
            return Err(error.into());
        }
        fs::File::open(&self.dir)?.sync_all()?;
        Ok(())
    }

    /// Drops the oldest messages until the history fits the limits; returns the file bytes.
    fn bounded_bytes(&self, session: &mut Session) -> Result<Vec<u8>, SessionError> {
        if session.messages.len() > self.limits.max_messages {
            let excess = session.messages.len() - self.limits.max_messages;
            session.messages.drain(..excess);
        }
        loop {
            let file = SessionFile {
                version: FILE_VERSION,
                session_id: session.id.clone(),
                messages: std::mem::take(&mut session.messages),
                turns: session.turns,
            };
            let bytes = serde_json::to_vec(&file).map_err(|e| SessionError::Io(e.into()));
            session.messages = file.messages;
            let bytes = bytes?;
            if bytes.len() <= self.limits.max_file_bytes || session.messages.is_empty() {
                if bytes.len() > self.limits.max_file_bytes {
                    eprintln!("awp-agent: session file limit is smaller than an empty session");
                }
                return Ok(bytes);
            }
            session.messages.remove(0);
            if session.messages.is_empty() {
                eprintln!(
                    "awp-agent: the newest message alone exceeds the session file limit; history is empty"
                );
            }
        }
    }

    fn ensure_dir(&self) -> Result<(), SessionError> {
        create_private_dir(&self.dir)?;
        check_private_dir(&self.dir)
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)
}

#[cfg(unix)]
fn check_private_dir(dir: &Path) -> Result<(), SessionError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(SessionError::InsecureDirectory);
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_dir(_dir: &Path) -> Result<(), SessionError> {
    Ok(())
}

/// Creates `path` exclusively (`0600` on Unix), writes `bytes` and fsyncs.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// 64-bit FNV-1a, to shorten long ids into file names (not a security boundary: the file stores the full id).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, limits: SessionLimits) -> SessionStore {
        SessionStore {
            dir: dir.join("sessions"),
            limits,
        }
    }

    fn message(role: Role, content: &str) -> Message {
        Message {
            role,
            content: content.to_owned(),
        }
    }

    #[test]
    fn session_ids_are_random_and_valid() {
        let a = new_session_id().expect("random");
        let b = new_session_id().expect("random");
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert!(is_valid_session_id(&a));
        assert!(is_valid_session_id(&"a".repeat(256)));
        assert!(!is_valid_session_id(&"a".repeat(257)));
        assert!(!is_valid_session_id(""));
        assert!(!is_valid_session_id("a/b"));
        assert!(!is_valid_session_id("a b"));
    }

    #[test]
    fn directory_selection_follows_the_documented_order() {
        let pick = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            SessionStore::from_vars(
                |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
                SessionLimits::default(),
            )
            .map(|s| s.dir)
        };
        let all = [
            ("AWP_AGENT_SESSION_DIR", "/a"),
            ("XDG_STATE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(pick(&all).expect("dir"), PathBuf::from("/a"));
        assert_eq!(
            pick(&all[1..]).expect("dir"),
            PathBuf::from("/x/awp-agent/sessions")
        );
        assert_eq!(
            pick(&all[2..]).expect("dir"),
            PathBuf::from("/h/.local/state/awp-agent/sessions")
        );
        assert_eq!(
            pick(&[("AWP_AGENT_SESSION_DIR", ""), ("HOME", "/h")]).expect("dir"),
            PathBuf::from("/h/.local/state/awp-agent/sessions")
        );
        assert_eq!(
            pick(&[]).map_err(|e| e.code()),
            Err("session_dir_unavailable")
        );
    }

    #[test]
    fn save_then_load_round_trips_with_private_permissions() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = store(tmp.path(), SessionLimits::default());
        let long_id = "L".repeat(256);
        for id in ["abc", "..", long_id.as_str()] {
            assert_eq!(store.load(id).expect("empty").messages, vec![]);
            let mut session = Session {
                id: id.to_owned(),
                turns: 7,
                messages: vec![message(Role::User, "hi"), message(Role::Assistant, "hello")],
            };
            store.save(&mut session).expect("saved");
            // The turn count is kept even when it exceeds the messages left in the bounded history.
            assert_eq!(store.load(id).expect("loaded"), session);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode(&store.dir), 0o700);
            for entry in fs::read_dir(&store.dir).expect("dir") {
                let path = entry.expect("entry").path();
                assert_eq!(mode(&path), 0o600, "{}", path.display());
                assert!(
                    !path.to_string_lossy().contains(".tmp-"),
                    "temp file left behind"
                );
            }
        }
    }

    #[test]
    fn a_file_of_another_session_or_garbage_is_corrupt() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = store(tmp.path(), SessionLimits::default());
        let mut session = Session {
            id: "one".into(),
            turns: 0,
            messages: vec![],
        };
        store.save(&mut session).expect("saved");
        fs::copy(store.file_path("one"), store.file_path("two")).expect("copy");
        assert_eq!(
            store.load("two").map_err(|e| e.code()),
            Err("session_file_corrupt")
        );
        fs::write(store.file_path("three"), b"{not json").expect("write");
        assert_eq!(
            store.load("three").map_err(|e| e.code()),
            Err("session_file_corrupt")
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_open_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = store(tmp.path(), SessionLimits::default());
        fs::create_dir(&store.dir).expect("mkdir");
        fs::set_permissions(&store.dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut session = Session {
            id: "x".into(),
            turns: 0,
            messages: vec![],
        };
        assert_eq!(
            store.save(&mut session).map_err(|e| e.code()),
            Err("session_dir_insecure")
        );
    }

    #[test]
    fn message_limit_keeps_the_newest_at_the_limit_and_one_past() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let limits = SessionLimits {
            max_messages: 4,
            ..SessionLimits::default()
        };
        let store = store(tmp.path(), limits);
        for (count, kept_from) in [(4usize, 0usize), (5, 1)] {
            let messages: Vec<Message> = (0..count)
                .map(|i| message(Role::User, &i.to_string()))
                .collect();
            let mut session = Session {
                id: format!("s{count}"),
                turns: 0,
                messages: messages.clone(),
            };
            store.save(&mut session).expect("saved");
            let loaded = store.load(&session.id).expect("loaded");
            assert_eq!(loaded.messages, messages[kept_from..].to_vec());
        }
    }

    #[test]
    fn a_new_message_fits_at_the_limit_and_is_refused_one_past() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let session = Session {
            id: "s".into(),
            turns: 9,
            messages: vec![message(Role::User, "older")],
        };
        // The file of this session holding only the new message, turn count 10.
        let envelope = r#"{"version":1,"session_id":"s","messages":[{"role":"user","content":""}],"turns":10}"#;
        let text = "x".repeat(100);
        let limit = envelope.len() + text.len();
        let store = store(
            tmp.path(),
            SessionLimits {
                max_file_bytes: limit,
                ..SessionLimits::default()
            },
        );
        assert_eq!(
            store.check_fits(&session, &message(Role::User, &text)),
            Ok(())
        );
        let error = store
            .check_fits(&session, &message(Role::User, &format!("{text}x")))
            .expect_err("one byte past the limit");
        assert_eq!(
            error,
            MessageTooLarge {
                needed: limit + 1,
                limit
            }
        );
        assert_eq!(error.code(), "message_too_large");
        // JSON escaping counts: a quote takes two bytes in the file.
        let quoted = format!("{}\"", "x".repeat(99));
        assert_eq!(
            store
                .check_fits(&session, &message(Role::User, &quoted))
                .map_err(|e| e.needed),
            Err(limit + 1)
        );
    }

    #[test]
    fn byte_limit_keeps_the_newest_at_the_limit_and_one_past() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let messages = vec![
            message(Role::User, "aaaa"),
            message(Role::Assistant, "bbbb"),
        ];
        let exact = serde_json::to_vec(&SessionFile {
            version: FILE_VERSION,
            session_id: "s".into(),
            messages: messages.clone(),
            turns: 0,
        })
        .expect("json")
        .len();
        for (max_file_bytes, kept_from) in [(exact, 0usize), (exact - 1, 1)] {
            let store = store(
                tmp.path(),
                SessionLimits {
                    max_file_bytes,
                    ..SessionLimits::default()
                },
            );
            let mut session = Session {
                id: "s".into(),
                turns: 0,
                messages: messages.clone(),
            };
            store.save(&mut session).expect("saved");
            assert_eq!(
                store.load("s").expect("loaded").messages,
                messages[kept_from..].to_vec()
            );
            assert!(
                fs::metadata(store.file_path("s")).expect("meta").len() as usize <= max_file_bytes
            );
        }
    }
}
