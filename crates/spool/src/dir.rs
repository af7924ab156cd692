//! The private spool directory and the file operations inside it, all relative to one verified directory fd.
//!
//! Every call here is blocking; the shell runs them on tokio's blocking pool.

use std::fs::DirBuilder;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::error::SpoolError;
use crate::id::ArtifactId;

/// Prefix of every file the spool creates; startup cleanup touches nothing else.
pub(crate) const FILE_PREFIX: &str = "aw-spool-";
/// Suffix of a file still being written.
pub(crate) const PARTIAL_SUFFIX: &str = ".partial";

/// `aw-spool-<id>`: a published artifact.
pub(crate) fn final_name(id: &ArtifactId) -> String {
    format!("{FILE_PREFIX}{id}")
}

/// `aw-spool-<id>.partial`: an artifact being written.
pub(crate) fn partial_name(id: &ArtifactId) -> String {
    format!("{FILE_PREFIX}{id}{PARTIAL_SUFFIX}")
}

/// Whether `name` is exactly a name [`final_name`] or [`partial_name`] can produce.
pub(crate) fn is_own_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(FILE_PREFIX.as_bytes()) else {
        return false;
    };
    let id = rest.strip_suffix(PARTIAL_SUFFIX.as_bytes()).unwrap_or(rest);
    std::str::from_utf8(id).is_ok_and(|id| ArtifactId::parse(id).is_ok())
}

/// Creates `path` (and missing parents) with mode 0700 if absent, then opens and verifies it: not a symlink, a
/// directory, owned by the effective uid, no group/other permission bits. An existing directory with wrong bits is
/// refused, not repaired.
pub(crate) fn open_private_dir(path: &Path) -> Result<OwnedFd, SpoolError> {
    match DirBuilder::new().recursive(true).mode(0o700).create(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error.into()),
    }
    let before = rustix::fs::lstat(path)?;
    match FileType::from_raw_mode(before.st_mode) {
        FileType::Directory => {}
        FileType::Symlink => return Err(SpoolError::UnsafeDirectory("it is a symlink")),
        _ => return Err(SpoolError::UnsafeDirectory("it is not a directory")),
    }
    let fd = rustix::fs::open(
        path,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )
    .map_err(|errno| match errno {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            SpoolError::UnsafeDirectory("it changed while being opened")
        }
        other => other.into(),
    })?;
    let stat = rustix::fs::fstat(&fd)?;
    if stat.st_dev != before.st_dev || stat.st_ino != before.st_ino {
        return Err(SpoolError::UnsafeDirectory("it changed while being opened"));
    }
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(SpoolError::UnsafeDirectory("it is owned by another user"));
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(SpoolError::UnsafeDirectory(
            "it has group or other permission bits",
        ));
    }
    Ok(fd)
}

/// Opens `name` for writing: created exclusively (never an existing file, never through a symlink), mode 0600.
pub(crate) fn create_exclusive(dir: &OwnedFd, name: &str) -> Result<std::fs::File, SpoolError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )?;
    Ok(std::fs::File::from(fd))
}

/// Opens `name` for reading if it is a regular file of exactly `size` bytes.
pub(crate) fn open_published(
    dir: &OwnedFd,
    name: &str,
    size: u64,
) -> Result<std::fs::File, SpoolError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| match errno {
        rustix::io::Errno::NOENT | rustix::io::Errno::LOOP => SpoolError::Corrupted,
        other => other.into(),
    })?;
    let stat = rustix::fs::fstat(&fd)?;
    let regular = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile;
    if !regular || u64::try_from(stat.st_size).ok() != Some(size) {
        return Err(SpoolError::Corrupted);
    }
    Ok(std::fs::File::from(fd))
}

/// Publishes `from` as `to` without ever replacing an existing `to`: a hard link then unlink of `from`; where the
/// filesystem refuses hard links, an exclusive copy (fsynced) then unlink of `from`.
pub(crate) fn publish(dir: &OwnedFd, from: &str, to: &str) -> Result<(), SpoolError> {
    match rustix::fs::linkat(dir, from, dir, to, AtFlags::empty()) {
        Ok(()) => {}
        Err(rustix::io::Errno::PERM | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::MLINK) => {
            publish_by_copy(dir, from, to)?;
        }
        Err(errno) => return Err(errno.into()),
    }
    rustix::fs::unlinkat(dir, from, AtFlags::empty())?;
    Ok(())
}

/// The no-hard-link fallback of [`publish`]: copy `from` into a new exclusive `to`, fsync it; `from` is kept.
pub(crate) fn publish_by_copy(dir: &OwnedFd, from: &str, to: &str) -> Result<(), SpoolError> {
    let source = rustix::fs::openat(
        dir,
        from,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut source = std::fs::File::from(source);
    let mut target = create_exclusive(dir, to)?;
    let copied = io::copy(&mut source, &mut target).and_then(|_| target.sync_all());
    if let Err(error) = copied {
        let _ = rustix::fs::unlinkat(dir, to, AtFlags::empty());
        return Err(error.into());
    }
    Ok(())
}

/// Unlinks `name`; a file that is already gone is not an error.
pub(crate) fn remove(dir: &OwnedFd, name: &str) -> Result<(), SpoolError> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Startup cleanup: unlinks every regular file whose name is one of the spool's own ([`is_own_name`]); anything
/// else in the directory is left alone. Returns how many files were removed.
pub(crate) fn remove_own_files(dir: &OwnedFd) -> Result<usize, SpoolError> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if is_own_name(name) {
            names.push(entry.file_name().to_owned());
        }
    }
    let mut removed = 0;
    for name in names {
        let Ok(stat) = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            continue;
        }
        match rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::empty()) {
            Ok(()) => removed += 1,
            Err(rustix::io::Errno::NOENT) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn own_names_are_exactly_prefix_id_and_optional_partial_suffix() {
        let id = ArtifactId::from_random_bytes([9; 24]);
        assert!(is_own_name(final_name(&id).as_bytes()));
        assert!(is_own_name(partial_name(&id).as_bytes()));
        for foreign in [
            "aw-spool-".to_string(),
            format!("aw-spool-{id}.tmp"),
            format!("aw-spool-{id}.partial.partial"),
            format!("x-aw-spool-{id}"),
            format!("aw-spool-{}", &id.as_str()[1..]),
            "notes.txt".to_string(),
        ] {
            assert!(!is_own_name(foreign.as_bytes()), "{foreign}");
        }
    }

    #[test]
    fn copy_fallback_publishes_without_overwriting() {
        let temp = tempfile::tempdir().unwrap();
        let dir = open_private_dir(&temp.path().join("spool")).unwrap();
        create_exclusive(&dir, "a.partial")
            .unwrap()
            .write_all(b"bytes")
            .unwrap();
        publish_by_copy(&dir, "a.partial", "a").unwrap();
        let mut copied = String::new();
        open_published(&dir, "a", 5)
            .unwrap()
            .read_to_string(&mut copied)
            .unwrap();
        assert_eq!(copied, "bytes");
        // The target exists now: a second publication must fail and leave it intact.
        let error = publish_by_copy(&dir, "a.partial", "a").unwrap_err();
        assert!(
            matches!(error, SpoolError::Io(io::ErrorKind::AlreadyExists)),
            "{error:?}"
        );
        assert!(open_published(&dir, "a", 5).is_ok());
        // A link-based publication refuses to replace too.
        assert!(publish(&dir, "a.partial", "a").is_err());
    }
}
