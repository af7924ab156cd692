//! The tokio shell: [`ArtifactSpool`], its streaming [`ArtifactWriter`] and [`ArtifactReader`].

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf, Take};

use crate::core::{ArtifactSpec, SpoolCore, Usage};
use crate::dir;
use crate::error::SpoolError;
use crate::id::ArtifactId;
use crate::limits::Limits;
use crate::meta::ArtifactMetadata;

/// Size of the buffer [`ArtifactWriter::write_from`] reads into, bytes.
pub const COPY_CHUNK_BYTES: usize = 64 * 1024;

#[derive(Debug)]
struct Inner {
    dir: OwnedFd,
    core: Mutex<SpoolCore>,
    removed_at_startup: usize,
}

impl Inner {
    fn core(&self) -> MutexGuard<'_, SpoolCore> {
        // The core's methods do not panic mid-update; a poisoned lock still holds consistent state.
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Owned, expiring, hashed artifact files in one private directory.
///
/// Cheap to clone (an `Arc`); share one per host. Records live in memory only, so every file the spool finds at
/// [`ArtifactSpool::open`] is a leftover of an earlier run and is removed. Ids are parsed with
/// [`ArtifactId::parse`] before any lookup or filesystem call, and every lookup is ownership-checked: an unknown,
/// expired or foreign id is [`SpoolError::NotFound`] alike. Nothing returned or logged contains a path.
///
/// Source: DeepChat local control plane spec, "ArtifactSpool" and "File I/O Boundary"; reference values in
/// `protocols/local-control.md`.
#[derive(Debug, Clone)]
pub struct ArtifactSpool {
    inner: Arc<Inner>,
}

impl ArtifactSpool {
    /// Opens (creating with mode 0700 if needed) the spool directory `path`, verifies it (not a symlink, a
    /// directory, owned by the effective uid, no group/other bits) and removes the files of earlier runs: regular
    /// files named `aw-spool-<id>` or `aw-spool-<id>.partial`, nothing else.
    ///
    /// # Errors
    /// [`SpoolError::UnsafeDirectory`] for a directory that is not private; [`SpoolError::Io`] when it cannot be
    /// created, opened or listed.
    pub async fn open(path: impl AsRef<Path>, limits: Limits) -> Result<Self, SpoolError> {
        let path = path.as_ref().to_owned();
        let (dir, removed_at_startup) = blocking(move || {
            let dir = dir::open_private_dir(&path)?;
            let removed = dir::remove_own_files(&dir)?;
            Ok((dir, removed))
        })
        .await?;
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                core: Mutex::new(SpoolCore::new(limits)),
                removed_at_startup,
            }),
        })
    }

    /// How many leftover files [`ArtifactSpool::open`] removed.
    pub fn removed_at_startup(&self) -> usize {
        self.inner.removed_at_startup
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.inner.core().limits().clone()
    }

    /// Starts a new artifact: a fresh random id, one count taken in each quota scope, and a 0600 file created
    /// exclusively under a temporary name. Write with [`ArtifactWriter::write`], then
    /// [`ArtifactWriter::publish`]; dropping the writer unpublished removes the file and releases the quota.
    ///
    /// # Errors
    /// [`SpoolError::InvalidRequest`] for a bad spec, [`SpoolError::QuotaExceeded`] (count) when a scope is full,
    /// [`SpoolError::Random`] or [`SpoolError::Io`].
    pub async fn create(&self, spec: ArtifactSpec) -> Result<ArtifactWriter, SpoolError> {
        let id = ArtifactId::generate().map_err(|_| SpoolError::Random)?;
        let (expired, begun) = {
            let mut core = self.inner.core();
            // Expired artifacts give their quota back even when nobody sweeps.
            let expired = core.sweep_expired(Instant::now());
            (expired, core.begin(id, spec))
        };
        if !expired.is_empty() {
            // Their records are gone; unlinking the files needs no waiting for.
            let inner = Arc::clone(&self.inner);
            drop(tokio::task::spawn_blocking(move || {
                for id in &expired {
                    let _ = dir::remove(&inner.dir, &dir::final_name(id));
                }
            }));
        }
        begun?;
        // One `openat` in a local private directory, made in place rather than on the blocking pool so that there
        // is no await between taking the quota and owning the file: a caller that drops this future can leak
        // neither.
        match dir::create_exclusive(&self.inner.dir, &dir::partial_name(&id)) {
            Ok(file) => Ok(ArtifactWriter {
                inner: Arc::clone(&self.inner),
                id,
                file: Some(tokio::fs::File::from_std(file)),
                hasher: Sha256::new(),
                written: 0,
                open: true,
                interrupted: false,
            }),
            Err(error) => {
                self.inner.core().abort(&id);
                Err(error)
            }
        }
    }

    /// The metadata of `owner`'s published, unexpired artifact `id`.
    ///
    /// # Errors
    /// [`SpoolError::NotFound`] for a malformed id (refused before any lookup), an unknown, expired or deleted
    /// one, or another owner's.
    pub fn describe(&self, owner: &str, id: &str) -> Result<ArtifactMetadata, SpoolError> {
        let id = ArtifactId::parse(id)?;
        Ok(self
            .inner
            .core()
            .describe(owner, &id, Instant::now())?
            .metadata())
    }

    /// Opens `owner`'s artifact `id` for a streaming read: the metadata and an [`ArtifactReader`] over exactly
    /// `size` bytes of the file. The reader keeps the bytes readable even if the artifact is deleted or expires
    /// meanwhile.
    ///
    /// # Errors
    /// [`SpoolError::NotFound`] as for [`ArtifactSpool::describe`]; [`SpoolError::Corrupted`] if the file is
    /// missing or its size changed; [`SpoolError::Io`].
    pub async fn read(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<(ArtifactMetadata, ArtifactReader), SpoolError> {
        let id = ArtifactId::parse(id)?;
        let record = self
            .inner
            .core()
            .describe(owner, &id, Instant::now())?
            .clone();
        let inner = Arc::clone(&self.inner);
        let size = record.size;
        let file =
            blocking(move || dir::open_published(&inner.dir, &dir::final_name(&id), size)).await?;
        let reader = ArtifactReader {
            inner: tokio::fs::File::from_std(file).take(size),
        };
        Ok((record.metadata(), reader))
    }

    /// Deletes `owner`'s artifact `id`: its quota is released and its file unlinked.
    ///
    /// # Errors
    /// [`SpoolError::NotFound`] as for [`ArtifactSpool::describe`]; [`SpoolError::Io`] if the unlink fails (the
    /// record is gone either way).
    pub async fn delete(&self, owner: &str, id: &str) -> Result<(), SpoolError> {
        let id = ArtifactId::parse(id)?;
        self.inner.core().delete(owner, &id, Instant::now())?;
        self.unlink(vec![dir::final_name(&id)]).await
    }

    /// Removes the published artifact `id` (record and file) without an ownership check; returns whether it
    /// existed. For the producer's cleanup when a request fails after some outputs were published (DeepChat's
    /// `discard`); callers' deletions go through [`ArtifactSpool::delete`].
    ///
    /// # Errors
    /// [`SpoolError::Io`] if the unlink fails (the record is gone either way).
    pub async fn discard(&self, id: ArtifactId) -> Result<bool, SpoolError> {
        if !self.inner.core().discard(&id) {
            return Ok(false);
        }
        self.unlink(vec![dir::final_name(&id)]).await?;
        Ok(true)
    }

    /// Removes every published artifact whose expiry is at or before `now` (records and files) and returns how many
    /// there were. Call it periodically (e.g. every minute) with `Instant::now()`.
    ///
    /// # Errors
    /// [`SpoolError::Io`] if an unlink fails; the records are released regardless.
    pub async fn sweep_expired(&self, now: Instant) -> Result<usize, SpoolError> {
        let expired = self.inner.core().sweep_expired(now);
        let count = expired.len();
        self.unlink(expired.iter().map(dir::final_name).collect())
            .await?;
        Ok(count)
    }

    /// Shutdown cleanup: drops every record and removes every file of this spool, published or partial. Writers
    /// still open fail with [`SpoolError::WriterClosed`] on their next call.
    ///
    /// # Errors
    /// [`SpoolError::Io`] if an unlink fails.
    pub async fn clear(&self) -> Result<(), SpoolError> {
        let ids = self.inner.core().clear();
        let names = ids
            .iter()
            .flat_map(|id| [dir::final_name(id), dir::partial_name(id)])
            .collect();
        self.unlink(names).await
    }

    /// Usage of the whole spool (bytes reserved and live artifacts).
    pub fn total_usage(&self) -> Usage {
        self.inner.core().total_usage()
    }

    /// Usage of one owner.
    pub fn owner_usage(&self, owner: &str) -> Usage {
        self.inner.core().owner_usage(owner)
    }

    async fn unlink(&self, names: Vec<String>) -> Result<(), SpoolError> {
        if names.is_empty() {
            return Ok(());
        }
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let mut result = Ok(());
            for name in names {
                if let Err(error) = dir::remove(&inner.dir, &name) {
                    result = Err(error);
                }
            }
            result
        })
        .await
    }
}

/// Streams one artifact's bytes into its temporary file, hashing with SHA-256 and reserving quota before each
/// write.
///
/// A failed write (quota or IO) closes the writer: its file is removed and its reservation released before the
/// error is returned, so nothing of it stays on disk. [`ArtifactWriter::abort`] and dropping the writer do the same.
#[derive(Debug)]
pub struct ArtifactWriter {
    inner: Arc<Inner>,
    id: ArtifactId,
    file: Option<tokio::fs::File>,
    hasher: Sha256,
    written: u64,
    open: bool,
    /// Set while a write is in flight: still set on the next call means the caller dropped a write half-way, and
    /// what reached the file is unknown, so the writer closes.
    interrupted: bool,
}

impl ArtifactWriter {
    /// The id the artifact will be published under.
    pub fn id(&self) -> ArtifactId {
        self.id
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends `bytes`: the quota is reserved first, then the bytes are written and hashed.
    ///
    /// Not cancellation-safe by design: if the caller drops this future before it completes, the next call on
    /// the writer fails with [`SpoolError::WriterClosed`] and removes the artifact (dropping the writer does too).
    ///
    /// # Errors
    /// [`SpoolError::QuotaExceeded`] (bytes) before anything of `bytes` is written, [`SpoolError::Io`]; either
    /// closes the writer and removes its file. [`SpoolError::WriterClosed`] after that.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), SpoolError> {
        self.check_open().await?;
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let reserved = self.inner.core().reserve(&self.id, len);
        if let Err(error) = reserved {
            self.close_and_remove().await;
            return Err(error);
        }
        let Some(file) = self.file.as_mut() else {
            return Err(SpoolError::WriterClosed);
        };
        self.interrupted = true;
        if let Err(error) = file.write_all(bytes).await {
            self.close_and_remove().await;
            return Err(error.into());
        }
        self.interrupted = false;
        self.hasher.update(bytes);
        self.written += len;
        Ok(())
    }

    /// Copies `reader` to its end in chunks of [`COPY_CHUNK_BYTES`], each through [`ArtifactWriter::write`], and
    /// returns the bytes copied. Reading stops at the first chunk that would cross a quota.
    ///
    /// # Errors
    /// As for [`ArtifactWriter::write`]; a read error of `reader` is [`SpoolError::Io`] and closes the writer too.
    pub async fn write_from<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<u64, SpoolError> {
        let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
        let mut copied = 0u64;
        loop {
            let read = match reader.read(&mut buffer).await {
                Ok(0) => return Ok(copied),
                Ok(read) => read,
                Err(error) => {
                    self.close_and_remove().await;
                    return Err(error.into());
                }
            };
            let chunk = buffer.get(..read).unwrap_or_default();
            self.write(chunk).await?;
            copied += u64::try_from(read).unwrap_or(u64::MAX);
        }
    }

    /// Finishes the artifact: flushes the file, publishes it under its final name without overwriting anything
    /// (hard link + unlink, or an exclusive copy where links are refused), and starts its TTL.
    ///
    /// # Errors
    /// [`SpoolError::WriterClosed`] after a failure, abort or [`ArtifactSpool::clear`]; [`SpoolError::Io`]. On
    /// error nothing of the artifact stays on disk and its quota is released.
    pub async fn publish(mut self) -> Result<ArtifactMetadata, SpoolError> {
        self.check_open().await?;
        let Some(mut file) = self.file.take() else {
            return Err(SpoolError::WriterClosed);
        };
        if let Err(error) = file.flush().await {
            drop(file);
            self.close_and_remove().await;
            return Err(error.into());
        }
        drop(file);
        // From here a blocking task owns the artifact and finishes it (published or removed) even if the caller
        // drops this future, so a cancelled publish never leaves a file without a record or a record without a file.
        self.open = false;
        let inner = Arc::clone(&self.inner);
        let id = self.id;
        let size = self.written;
        let sha256: [u8; 32] = std::mem::take(&mut self.hasher).finalize().into();
        blocking(move || {
            let partial = dir::partial_name(&id);
            let final_name = dir::final_name(&id);
            if let Err(error) = dir::publish(&inner.dir, &partial, &final_name) {
                let _ = dir::remove(&inner.dir, &partial);
                inner.core().abort(&id);
                return Err(error);
            }
            let published = inner.core().publish(
                &id,
                size,
                sha256,
                unix_millis(SystemTime::now()),
                Instant::now(),
            );
            match published {
                Ok(record) => Ok(record.metadata()),
                Err(error) => {
                    // Cleared by shutdown meanwhile, or a cancelled write left the reservation and the bytes apart:
                    // the file must not outlive its record.
                    let _ = dir::remove(&inner.dir, &final_name);
                    inner.core().abort(&id);
                    Err(error)
                }
            }
        })
        .await
    }

    /// Drops the artifact: removes its file and releases its quota.
    pub async fn abort(mut self) {
        self.close_and_remove().await;
    }

    /// `Ok` if the writer may go on; closes it when an earlier write was dropped half-way.
    async fn check_open(&mut self) -> Result<(), SpoolError> {
        if !self.open {
            return Err(SpoolError::WriterClosed);
        }
        if self.interrupted {
            self.close_and_remove().await;
            return Err(SpoolError::WriterClosed);
        }
        Ok(())
    }

    async fn close_and_remove(&mut self) {
        if !self.open {
            return;
        }
        self.open = false;
        self.file = None;
        let inner = Arc::clone(&self.inner);
        let id = self.id;
        let _ = blocking(move || {
            let removed = dir::remove(&inner.dir, &dir::partial_name(&id));
            inner.core().abort(&id);
            removed
        })
        .await;
    }
}

impl Drop for ArtifactWriter {
    fn drop(&mut self) {
        if self.open {
            // Not awaited: a single unlink of a name in a local private directory.
            let _ = dir::remove(&self.inner.dir, &dir::partial_name(&self.id));
            self.inner.core().abort(&self.id);
        }
    }
}

/// The bytes of one published artifact, read from its file on demand: nothing is buffered beyond what the caller
/// asks for, so a slow consumer slows the read (back-pressure). Yields exactly the artifact's `size` bytes.
#[derive(Debug)]
pub struct ArtifactReader {
    inner: Take<tokio::fs::File>,
}

impl AsyncRead for ArtifactReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

async fn blocking<T, F>(job: F) -> Result<T, SpoolError>
where
    F: FnOnce() -> Result<T, SpoolError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(job)
        .await
        .map_err(|_| SpoolError::Io(io::ErrorKind::Other))?
}
