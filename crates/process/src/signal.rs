//! Signals to a child's process group (Unix, via `rustix`); other platforms fall back to killing the direct child.

use std::io;

/// A signal of the stop ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupSignal {
    /// `SIGTERM`: ask every process of the group to exit.
    Term,
    /// `SIGKILL`: end every process of the group.
    Kill,
}

/// Sends `signal` to every process in the process group `pgid`.
///
/// A group with no process left (`ESRCH`) is not an error: there is nothing to signal.
///
/// Reuse caveat: the group id is the direct child's pid. While the direct child is unreaped or any group member
/// lives, the kernel does not hand that id out again; once all are gone, a signal could only reach a stranger if the
/// pid was recycled for a new process that also made itself a group leader.
#[cfg(unix)]
pub(crate) fn signal_group(pgid: u32, signal: GroupSignal) -> io::Result<()> {
    use rustix::process::{Pid, Signal, kill_process_group};
    let pid = i32::try_from(pgid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid process group id {pgid}"),
            )
        })?;
    let sig = match signal {
        GroupSignal::Term => Signal::TERM,
        GroupSignal::Kill => Signal::KILL,
    };
    match kill_process_group(pid, sig) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Without process groups there is no group to signal; the stop ladder kills the direct child instead.
#[cfg(not(unix))]
pub(crate) fn signal_group(_pgid: u32, _signal: GroupSignal) -> io::Result<()> {
    Ok(())
}
