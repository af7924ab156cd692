//! Local inputs and outputs of the CLI: data-dir discovery, token choice, bounded stdin, `--out` publication.
//!
//! Sources: DeepChat `src/cli/discovery.ts` (user-data dir, agent token without fallback), `src/cli/stdin.ts`
//! (bounded UTF-8 stdin), `src/cli/artifacts.ts` (temp file beside the target, no-overwrite publication).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use agentwire_local_control::descriptor::{Descriptor, Token};
use agentwire_local_control::envelope::ErrorCode;
use agentwire_local_control::limits::AGENT_TOKEN_ENV;
use tokio::io::AsyncReadExt as _;

use crate::Failure;

/// Overrides the data dir (DeepChat's `DEEPCHAT_E2E_USER_DATA_DIR`), before `AWP_HOST_DATA_DIR`.
pub const DEEPCHAT_DATA_DIR_ENV: &str = "DEEPCHAT_E2E_USER_DATA_DIR";
/// awp-host's data dir override (`crates/host/src/paths.rs`).
pub const HOST_DATA_DIR_ENV: &str = "AWP_HOST_DATA_DIR";
/// Largest API key read from stdin, bytes (DeepChat `PROVIDER_CREDENTIAL_MAX_BYTES`, 64 KiB).
pub const MAX_CREDENTIAL_STDIN_BYTES: usize = 64 * 1024;
/// Largest stdin payload, bytes (4 MiB).
pub const MAX_STDIN_BYTES: usize = 4 * 1024 * 1024;

/// The host's data dir: `$DEEPCHAT_E2E_USER_DATA_DIR` (trimmed, made absolute), else `$AWP_HOST_DATA_DIR`,
/// else `$XDG_DATA_HOME/awp-host` (absolute values only), else `$HOME/.local/share/awp-host` — the same
/// order awp-host uses (`crates/host/src/paths.rs`, `data_dir`).
///
/// # Errors
/// `unavailable` when none is set.
pub fn data_dir(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, Failure> {
    let non_empty = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if let Some(dir) = non_empty(DEEPCHAT_DATA_DIR_ENV) {
        let dir = PathBuf::from(dir.trim());
        return Ok(if dir.is_absolute() {
            dir
        } else {
            std::env::current_dir()
                .map(|cwd| cwd.join(&dir))
                .unwrap_or(dir)
        });
    }
    if let Some(dir) = env(HOST_DATA_DIR_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(xdg) = env("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Ok(xdg.join("awp-host"));
    }
    if let Some(home) = env("HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home).join(".local/share/awp-host"));
    }
    Err(Failure::new(
        ErrorCode::Unavailable,
        format!("cannot find the host's data dir: set {HOST_DATA_DIR_ENV} or HOME"),
    ))
}

/// `true` when the caller is an agent (`DEEPCHAT_CLI_AGENT_TOKEN` is present, even empty).
pub fn is_agent_caller(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env(AGENT_TOKEN_ENV).is_some()
}

/// The token to present: the agent token when `DEEPCHAT_CLI_AGENT_TOKEN` is present, else the descriptor's.
///
/// # Errors
/// `authentication_failed` (exit 4) when the variable is present but not a valid token; the descriptor token is
/// never used as a fallback.
pub fn select_token(
    descriptor: &Descriptor,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Token, Failure> {
    match env(AGENT_TOKEN_ENV) {
        Some(value) => Token::parse(&value).ok_or_else(|| {
            Failure::new(
                ErrorCode::AuthenticationFailed,
                format!("{AGENT_TOKEN_ENV} is present but invalid; refusing human-token fallback"),
            )
        }),
        None => Ok(descriptor.token.clone()),
    }
}

/// Reads all of `reader` as UTF-8, refusing more than `max` bytes.
///
/// # Errors
/// `body_too_large` over `max`, `invalid_request` for invalid UTF-8 or a read failure.
pub async fn read_bounded(
    reader: &mut (impl tokio::io::AsyncRead + Unpin + ?Sized),
    max: usize,
) -> Result<String, Failure> {
    let mut buffer = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(limit)
        .read_to_end(&mut buffer)
        .await
        .map_err(|e| Failure::new(ErrorCode::InvalidRequest, format!("cannot read stdin: {e}")))?;
    if buffer.len() > max {
        return Err(Failure::new(
            ErrorCode::BodyTooLarge,
            format!("stdin exceeds {max} bytes"),
        ));
    }
    String::from_utf8(buffer)
        .map_err(|_| Failure::new(ErrorCode::InvalidRequest, "stdin is not valid UTF-8"))
}

/// A private temp file beside an `--out` target; removed on drop unless published.
#[derive(Debug)]
pub struct TempOutput {
    path: PathBuf,
    published: bool,
}

impl TempOutput {
    /// Creates `.<name>.<random>.deepchat-part` (mode 0600, exclusive) in `target`'s directory.
    ///
    /// # Errors
    /// `conflict` when `target` exists and `overwrite` is false, `invalid_request` for a target without a file
    /// name or an unusable directory.
    pub fn beside(target: &Path, overwrite: bool) -> Result<(TempOutput, std::fs::File), Failure> {
        let name = target
            .file_name()
            .ok_or_else(|| Failure::new(ErrorCode::InvalidRequest, "--out must name a file"))?;
        if !overwrite && std::fs::symlink_metadata(target).is_ok() {
            return Err(exists(target));
        }
        if target.is_dir() {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                "--out names a directory",
            ));
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut random = [0u8; 12];
        getrandom::fill(&mut random)
            .map_err(|e| Failure::new(ErrorCode::InternalError, format!("no randomness: {e}")))?;
        let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let path = dir.join(format!(
            ".{}.{suffix}.deepchat-part",
            name.to_string_lossy()
        ));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let file = options.open(&path).map_err(|e| {
            Failure::new(
                ErrorCode::InvalidRequest,
                format!("cannot create a temp file beside --out: {e}"),
            )
        })?;
        Ok((
            TempOutput {
                path,
                published: false,
            },
            file,
        ))
    }

    /// The temp file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the (fully written and synced) temp file to `target`: a hard link that fails if `target` exists
    /// (or, with `overwrite`, a rename over it); where hard links are unsupported, an exclusive copy + fsync.
    ///
    /// # Errors
    /// `conflict` when `target` exists and `overwrite` is false; `internal_error` for other IO failures.
    pub fn publish(mut self, target: &Path, overwrite: bool) -> Result<(), Failure> {
        let io = |e: std::io::Error| {
            Failure::new(
                ErrorCode::InternalError,
                format!("cannot publish --out: {e}"),
            )
        };
        if overwrite {
            std::fs::rename(&self.path, target).map_err(io)?;
            self.published = true;
            return Ok(());
        }
        match std::fs::hard_link(&self.path, target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists(target)),
            Err(_) => copy_exclusive(&self.path, target)?,
        }
        // The target now holds the bytes; the temp name is only a second link to remove.
        let _ = std::fs::remove_file(&self.path);
        self.published = true;
        Ok(())
    }
}

impl Drop for TempOutput {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn exists(target: &Path) -> Failure {
    Failure::new(
        ErrorCode::Conflict,
        format!(
            "{} already exists; pass --overwrite to replace it",
            target.display()
        ),
    )
}

fn copy_exclusive(from: &Path, target: &Path) -> Result<(), Failure> {
    let mut out = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(target)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists(target)),
        Err(e) => {
            return Err(Failure::new(
                ErrorCode::InternalError,
                format!("cannot publish --out: {e}"),
            ));
        }
    };
    let copied = std::fs::File::open(from)
        .and_then(|mut input| std::io::copy(&mut input, &mut out))
        .and_then(|_| out.flush())
        .and_then(|()| out.sync_all());
    if let Err(e) = copied {
        let _ = std::fs::remove_file(target);
        return Err(Failure::new(
            ErrorCode::InternalError,
            format!("cannot publish --out: {e}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn data_dir_precedence() {
        let d = |pairs: &'static [(&'static str, &'static str)]| data_dir(&env_of(pairs)).ok();
        assert_eq!(
            d(&[
                (DEEPCHAT_DATA_DIR_ENV, " /e2e "),
                (HOST_DATA_DIR_ENV, "/host")
            ]),
            Some(PathBuf::from("/e2e"))
        );
        assert_eq!(
            d(&[(DEEPCHAT_DATA_DIR_ENV, "  "), (HOST_DATA_DIR_ENV, "/host")]),
            Some(PathBuf::from("/host"))
        );
        assert_eq!(
            d(&[("XDG_DATA_HOME", "/x"), ("HOME", "/h")]),
            Some(PathBuf::from("/x/awp-host"))
        );
        assert_eq!(
            d(&[("XDG_DATA_HOME", "rel"), ("HOME", "/h")]),
            Some(PathBuf::from("/h/.local/share/awp-host"))
        );
        assert_eq!(d(&[]), None);
        let relative = d(&[(DEEPCHAT_DATA_DIR_ENV, "rel/dir")]).unwrap();
        assert!(relative.is_absolute() && relative.ends_with("rel/dir"));
    }

    #[tokio::test]
    async fn stdin_is_bounded_at_the_limit() {
        let at = vec![b'a'; 64];
        assert_eq!(
            read_bounded(&mut at.as_slice(), 64).await.unwrap().len(),
            64
        );
        let over = vec![b'a'; 65];
        let err = read_bounded(&mut over.as_slice(), 64).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::BodyTooLarge);
        let bad = [0xffu8, 0xfe];
        let err = read_bounded(&mut bad.as_slice(), 64).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest);
        assert_eq!(MAX_STDIN_BYTES, 4 * 1024 * 1024);
    }

    #[test]
    fn publish_never_overwrites_without_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.bin");
        let (temp, mut file) = TempOutput::beside(&target, false).unwrap();
        file.write_all(b"first").unwrap();
        file.sync_all().unwrap();
        let temp_path = temp.path().to_path_buf();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&temp_path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        temp.publish(&target, false).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"first");
        assert!(!temp_path.exists());

        // Exists now: refused before any temp file is made.
        let err = TempOutput::beside(&target, false).unwrap_err();
        assert_eq!(err.code, ErrorCode::Conflict);

        // A target that appears while downloading is not replaced either.
        let other = dir.path().join("late.bin");
        let (temp, mut file) = TempOutput::beside(&other, false).unwrap();
        file.write_all(b"mine").unwrap();
        std::fs::write(&other, b"theirs").unwrap();
        let temp_path = temp.path().to_path_buf();
        assert_eq!(
            temp.publish(&other, false).unwrap_err().code,
            ErrorCode::Conflict
        );
        assert_eq!(std::fs::read(&other).unwrap(), b"theirs");
        assert!(!temp_path.exists(), "temp removed on failure");

        // --overwrite replaces.
        let (temp, mut file) = TempOutput::beside(&target, true).unwrap();
        file.write_all(b"second").unwrap();
        temp.publish(&target, true).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"second");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".deepchat-part"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn dropped_temp_is_removed_and_directories_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (temp, _file) = TempOutput::beside(&dir.path().join("x"), false).unwrap();
        let path = temp.path().to_path_buf();
        assert!(path.exists());
        drop(temp);
        assert!(!path.exists());
        let err = TempOutput::beside(dir.path(), true).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest);
    }
}
