//! The artifact spool: owned, expiring, hashed output files that callers address by random id, never by path.
//!
//! A host that produces binary output for a local-control caller (an image, a video, speech) writes it here and
//! returns [`ArtifactMetadata`]; the caller downloads it in a separate request by id. This is DeepChat's
//! `ArtifactSpool` (local control plane spec, "ArtifactSpool" and "File I/O Boundary"; reference values in
//! `protocols/local-control.md`), and the crate holds DESIGN.md invariant 9: artifacts never expose paths.
//!
//! # How it behaves
//!
//! - **Ids.** 24 bytes from the OS random source as 32 characters of unpadded base64url ([`ArtifactId`]).
//!   [`ArtifactId::parse`] accepts exactly that alphabet and length and runs before any lookup or filesystem
//!   call, so `..%2F..`, `/`, NUL, padding, short or overlong ids are `not_found` without touching the disk.
//! - **Files.** One private directory, created 0700 and verified on open (lstat: not a symlink, a directory,
//!   owned by the effective uid, no group/other bits), then used only through its fd (`openat`, `linkat`,
//!   `unlinkat`). Each artifact is created exclusively (`O_EXCL|O_NOFOLLOW`, mode 0600) as
//!   `aw-spool-<id>.partial`, written through an [`ArtifactWriter`] that reserves quota before each write and
//!   hashes with SHA-256 as it goes, and published as `aw-spool-<id>` by hard link + unlink (an exclusive copy
//!   where links are refused), never replacing a file. A failed or aborted or dropped writer removes its file.
//! - **Quotas.** Bytes and counts per artifact, request, connection, owner and spool ([`Limits`]: 512 MiB,
//!   768 MiB, 1 GiB, 1 GiB, 2 GiB; 16/64/128/256 artifacts), enforced while streaming by the sans-IO
//!   [`SpoolCore`], whose reservations are released on abort, delete or expiry.
//! - **Ownership.** [`ArtifactSpool::describe`], [`ArtifactSpool::read`] and [`ArtifactSpool::delete`] take the
//!   caller's owner key; another owner's artifact is `not_found`, exactly like a missing one.
//!   [`ArtifactSpool::discard`] is the producer's unchecked cleanup of outputs of a request that failed later.
//! - **Expiry.** TTL 1 h by default, at most 7 days; an expired artifact is `not_found` at once, its quota comes
//!   back at the next [`ArtifactSpool::create`], and [`ArtifactSpool::sweep_expired`] removes records and files;
//!   [`ArtifactSpool::open`] removes leftovers of earlier runs (only files matching the spool's own name
//!   pattern); [`ArtifactSpool::clear`] is the shutdown cleanup.
//! - **Reads** stream from the file ([`ArtifactReader`] is an `AsyncRead` over exactly `size` bytes), never
//!   loading an artifact into memory.
//!
//! # What is deliberately absent
//!
//! - No persistence of records: artifacts do not survive a restart (DeepChat's spool keeps its metadata in
//!   memory too), so files are not fsynced before publication and startup removes every earlier file.
//! - No input uploads: those use the local-control crate's private temporary bodies, not the spool.
//! - No HTTP, no caller model: the embedder maps its callers to owner/connection/request keys and the errors'
//!   [`SpoolError::code`] to its envelopes.
//! - Unix only (`rustix` fd-relative calls, uid and mode checks).
//!
//! # Code map
//!
//! - `id`: [`ArtifactId`]. `limits`: [`Limits`]. `meta`: [`ArtifactMetadata`] (wire DTO) and the spec checks.
//! - `core`: [`SpoolCore`], the sans-IO records, quotas and expiry on `now: Instant`.
//! - `dir`: the private directory and the fd-relative file operations (blocking; run on tokio's blocking pool).
//! - `spool`: [`ArtifactSpool`], [`ArtifactWriter`], [`ArtifactReader`], the tokio shell.
//! - `error`: [`SpoolError`] and its stable codes.
//!
//! The shell needs a tokio runtime (it uses `spawn_blocking` and `tokio::fs`).

mod core;
mod dir;
mod error;
mod id;
mod limits;
mod meta;
mod spool;

pub use crate::core::{ArtifactRecord, ArtifactSpec, Scope, SpoolCore, Usage};
pub use crate::error::{QuotaKind, QuotaScope, SpoolError};
pub use crate::id::{
    ARTIFACT_ID_BYTES, ARTIFACT_ID_LEN, ArtifactId, InvalidArtifactId, RandomUnavailable,
};
pub use crate::limits::Limits;
pub use crate::meta::{ArtifactMetadata, MAX_FILENAME_BYTES, MAX_KEY_BYTES, MAX_MIME_TYPE_BYTES};
pub use crate::spool::{ArtifactReader, ArtifactSpool, ArtifactWriter, COPY_CHUNK_BYTES};
