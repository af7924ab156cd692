//! Provider API keys, kept apart from the SQLite store: `<data dir>/credentials/provider-keys.json`, a 0600 file
//! in a 0700 directory, replaced atomically (temp file in the same directory, fsync, rename, fsync of the
//! directory) under an exclusive lock file, so a crash leaves the old or the new file, never a torn one.
//!
//! Only the provider runtime reads keys ([`super::ProviderRegistry::resolve`]); every other caller sees whether a
//! key is stored. Keys are `agentwire_provider::ApiKey`s (at most 4096 bytes, no whitespace or control characters;
//! `Debug`/`Display` print `***`, no `Serialize`); a stored text that is not a valid key is `corrupt`. And
//! [`CredentialError`] carries paths and counts only (a parse error of the file is reported as `corrupt`
//! without serde's text, which could quote the file's content).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Directory under the data directory holding the credential file.
pub const CREDENTIALS_DIR: &str = "credentials";
/// The credential file's name.
pub const CREDENTIALS_FILE: &str = "provider-keys.json";
const LOCK_FILE: &str = ".lock";

/// Bounds of the credential file. Every field documents its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialLimits {
    /// Largest credential file read, bytes; a larger file is [`CredentialError::TooLarge`]. Default 8 MiB.
    pub max_file_bytes: u64,
    /// Most stored keys (one per provider); one more is [`CredentialError::TooMany`]. Default 1000 (DeepChat's
    /// provider list bound).
    pub max_keys: usize,
}

impl Default for CredentialLimits {
    fn default() -> Self {
        CredentialLimits {
            max_file_bytes: 8 * 1024 * 1024,
            max_keys: 1000,
        }
    }
}

pub use agentwire_provider::ApiKey;

/// Why the credential file could not be read or written. Never contains a key.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Reading, writing, locking or securing a file or the directory failed.
    #[error("credential store file error at {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The IO failure.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a credential file this version reads.
    #[error("credential file {0} is corrupt")]
    Corrupt(PathBuf),
    /// The file is over [`CredentialLimits::max_file_bytes`].
    #[error("credential file is larger than {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// Storing one more key would pass [`CredentialLimits::max_keys`].
    #[error("more than {max} stored credentials")]
    TooMany {
        /// The limit.
        max: usize,
    },
}

impl CredentialError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            CredentialError::Io { .. } => "credential_store_io",
            CredentialError::Corrupt(_) => "credential_store_corrupt",
            CredentialError::TooLarge { .. } => "credential_store_too_large",
            CredentialError::TooMany { .. } => "too_many_credentials",
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Stored {
    version: u32,
    api_keys: BTreeMap<String, String>,
}

const FILE_VERSION: u32 = 1;

/// The credential file of one data directory.
#[derive(Debug, Clone)]
pub struct CredentialStore {
    dir: PathBuf,
    limits: CredentialLimits,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CredentialError + '_ {
    move |source| CredentialError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl CredentialStore {
    /// The store of `data_dir` (directory created 0700; an existing one is made 0700).
    ///
    /// # Errors
    /// [`CredentialError::Io`].
    pub fn open(
        data_dir: &Path,
        limits: CredentialLimits,
    ) -> Result<CredentialStore, CredentialError> {
        let dir = data_dir.join(CREDENTIALS_DIR);
        crate::paths::create_private_dir(&dir).map_err(|e| CredentialError::Io {
            path: dir.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir)
                .map_err(io(&dir))?
                .permissions()
                .mode();
            if mode & 0o777 != 0o700 {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io(&dir))?;
            }
        }
        Ok(CredentialStore { dir, limits })
    }

    /// The credential file's path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(CREDENTIALS_FILE)
    }

    fn read(&self) -> Result<Stored, CredentialError> {
        let path = self.path();
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Stored::default()),
            Err(e) => return Err(io(&path)(e)),
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata().map_err(io(&path))?.permissions().mode();
            if mode & 0o777 != 0o600 {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(io(&path))?;
            }
        }
        let mut bytes = Vec::new();
        file.take(self.limits.max_file_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io(&path))?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > self.limits.max_file_bytes {
            return Err(CredentialError::TooLarge {
                max: self.limits.max_file_bytes,
            });
        }
        let stored: Stored =
            serde_json::from_slice(&bytes).map_err(|_| CredentialError::Corrupt(path.clone()))?;
        if stored.version != FILE_VERSION {
            return Err(CredentialError::Corrupt(path));
        }
        Ok(stored)
    }

    fn write(&self, stored: &Stored) -> Result<(), CredentialError> {
        let path = self.path();
        let bytes =
            serde_json::to_vec(stored).map_err(|_| CredentialError::Corrupt(path.clone()))?;
        // tempfile creates 0600 files.
        let mut tmp = tempfile::Builder::new()
            .prefix(".provider-keys.")
            .tempfile_in(&self.dir)
            .map_err(io(&self.dir))?;
        tmp.write_all(&bytes).map_err(io(&path))?;
        tmp.as_file().sync_all().map_err(io(&path))?;
        tmp.persist(&path).map_err(|e| io(&path)(e.error))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))?;
        Ok(())
    }

    /// Runs `change` on the stored keys under the exclusive lock and writes the result when it says so.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut Stored) -> Result<(T, bool), CredentialError>,
    ) -> Result<T, CredentialError> {
        let lock_path = self.dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        lock.lock().map_err(io(&lock_path))?;
        let mut stored = self.read()?;
        stored.version = FILE_VERSION;
        let (answer, changed) = change(&mut stored)?;
        if changed {
            self.write(&stored)?;
        }
        Ok(answer)
    }

    /// The key of `provider_id`, if one is stored.
    ///
    /// # Errors
    /// [`CredentialError`] when the file cannot be read.
    pub fn get(&self, provider_id: &str) -> Result<Option<ApiKey>, CredentialError> {
        match self.read()?.api_keys.remove(provider_id) {
            None => Ok(None),
            Some(text) => ApiKey::new(&text)
                .map(Some)
                .map_err(|_| CredentialError::Corrupt(self.path())),
        }
    }

    /// The providers that have a stored key.
    ///
    /// # Errors
    /// [`CredentialError`] when the file cannot be read.
    pub fn configured(&self) -> Result<std::collections::BTreeSet<String>, CredentialError> {
        Ok(self.read()?.api_keys.into_keys().collect())
    }

    /// Stores (or replaces) the key of `provider_id`.
    ///
    /// # Errors
    /// [`CredentialError::TooMany`] past [`CredentialLimits::max_keys`]; IO errors.
    pub fn set(&self, provider_id: &str, key: &ApiKey) -> Result<(), CredentialError> {
        let max = self.limits.max_keys;
        self.update(|stored| {
            if !stored.api_keys.contains_key(provider_id) && stored.api_keys.len() >= max {
                return Err(CredentialError::TooMany { max });
            }
            stored
                .api_keys
                .insert(provider_id.to_owned(), key.expose().to_owned());
            Ok(((), true))
        })
    }

    /// Removes the key of `provider_id`; true when there was one.
    ///
    /// # Errors
    /// IO errors.
    pub fn clear(&self, provider_id: &str) -> Result<bool, CredentialError> {
        self.update(|stored| {
            let removed = stored.api_keys.remove(provider_id).is_some();
            Ok((removed, removed))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, max_keys: usize) -> CredentialStore {
        CredentialStore::open(
            dir,
            CredentialLimits {
                max_keys,
                ..CredentialLimits::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn keys_round_trip_in_a_private_file_and_never_print() {
        let tmp = tempfile::tempdir().unwrap();
        let creds = store(tmp.path(), 10);
        assert!(creds.get("p").unwrap().is_none());
        let key = ApiKey::new("sk-PLANTED-credential").unwrap();
        creds.set("p", &key).unwrap();
        assert_eq!(creds.get("p").unwrap(), Some(key.clone()));
        assert!(!format!("{key:?} {key}").contains("PLANTED"));
        assert!(creds.configured().unwrap().contains("p"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&creds.path()), 0o600);
            assert_eq!(mode(&tmp.path().join(CREDENTIALS_DIR)), 0o700);
        }
        assert!(creds.clear("p").unwrap());
        assert!(!creds.clear("p").unwrap());
        assert!(creds.get("p").unwrap().is_none());
        // Only the credential file and its lock are left: no temp files.
        let mut names: Vec<String> = std::fs::read_dir(tmp.path().join(CREDENTIALS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![LOCK_FILE.to_owned(), CREDENTIALS_FILE.to_owned()]
        );
    }

    #[test]
    fn the_key_count_is_bounded_at_the_limit_and_one_past_it() {
        let tmp = tempfile::tempdir().unwrap();
        let creds = store(tmp.path(), 2);
        creds.set("a", &ApiKey::new("1").unwrap()).unwrap();
        creds.set("b", &ApiKey::new("2").unwrap()).unwrap();
        creds.set("b", &ApiKey::new("3").unwrap()).unwrap();
        let err = creds.set("c", &ApiKey::new("4").unwrap()).unwrap_err();
        assert_eq!(err.code(), "too_many_credentials");
    }

    #[test]
    fn a_corrupt_or_oversized_file_is_a_typed_error_without_its_content() {
        let tmp = tempfile::tempdir().unwrap();
        let creds = store(tmp.path(), 10);
        std::fs::write(
            creds.path(),
            "{\"version\":1,\"apiKeys\":{\"p\":7,\"sk-LEAK\":1}}",
        )
        .unwrap();
        let err = creds.get("p").unwrap_err();
        assert_eq!(err.code(), "credential_store_corrupt");
        assert!(!format!("{err} {err:?}").contains("sk-LEAK"));
        let small = CredentialStore::open(
            tmp.path(),
            CredentialLimits {
                max_file_bytes: 8,
                max_keys: 10,
            },
        )
        .unwrap();
        std::fs::write(small.path(), "{\"version\":1}").unwrap();
        assert_eq!(
            small.get("p").unwrap_err().code(),
            "credential_store_too_large"
        );
        std::fs::write(small.path(), "{\"ve\":1}").unwrap();
        assert_eq!(
            small.get("p").unwrap_err().code(),
            "credential_store_corrupt"
        );
    }

    #[cfg(unix)]
    #[test]
    fn loose_permissions_are_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let creds = store(tmp.path(), 10);
        creds.set("p", &ApiKey::new("k").unwrap()).unwrap();
        std::fs::set_permissions(creds.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let dir = tmp.path().join(CREDENTIALS_DIR);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let creds = store(tmp.path(), 10);
        assert!(creds.get("p").unwrap().is_some());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&creds.path()), 0o600);
        assert_eq!(mode(&dir), 0o700);
    }
}
