//! Portable process liveness for tests that check a process (often a grandchild, not ours to wait for) was killed.
//!
//! The probe is `kill(pid, 0)`: `ESRCH` means the pid is gone, success or `EPERM` means a process holds it.
//! A process that was killed but not yet reaped is a zombie, which `kill(pid, 0)` still reports; where `/proc`
//! exists (Linux) its state letter in `/proc/<pid>/stat` tells a zombie apart, and a zombie counts as gone (the
//! kill happened; only the reaper is late). Without `/proc` (macOS, the BSDs) a zombie counts as **alive**: the
//! conservative direction for "it was killed" assertions, which then wait until the reaper (init/launchd for an
//! orphaned grandchild) collects it. A test must never use these helpers on its own un-reaped child: wait for that
//! child instead. No helper here treats "no `/proc`" as "gone", so a kill test cannot pass vacuously.

use std::time::Duration;

/// True while `pid` names a live, non-zombie process (on platforms without `/proc`, a zombie counts as alive; see
/// the module docs).
///
/// # Panics
/// When `pid` is 0 or above `i32::MAX`, or the probe fails with anything but `ESRCH`/`EPERM` (a broken test).
pub fn is_alive(pid: u32) -> bool {
    let raw = i32::try_from(pid).expect("pid fits in pid_t");
    let probe = rustix::process::Pid::from_raw(raw).expect("pid is positive");
    match rustix::process::test_kill_process(probe) {
        Err(rustix::io::Errno::SRCH) => false,
        Ok(()) | Err(rustix::io::Errno::PERM) => !is_zombie(pid),
        Err(err) => panic!("probing pid {pid} failed: {err}"),
    }
}

/// True when `/proc/<pid>/stat` says the process is a zombie. False when `/proc` is absent (the conservative
/// direction, see the module docs); also true when the entry vanished between the probe and the read on a system
/// that has `/proc` (the process was reaped meanwhile).
fn is_zombie(pid: u32) -> bool {
    if !std::path::Path::new("/proc/self/stat").exists() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Format: `pid (comm) state ...`; comm may contain spaces and parentheses, so split after the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Waits until `pid` is no longer alive ([`is_alive`]), polling every 10 ms; false when it is still alive after
/// `bound`. There is no event to wait on for a process that is not our child, so this polls; the bound is a hang
/// guard, not a timing assertion: pass tens of seconds.
pub async fn wait_gone(pid: u32, bound: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if !is_alive(pid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive() {
        assert!(is_alive(std::process::id()));
    }

    #[test]
    fn a_running_child_is_alive_and_gone_once_stopped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut command = agentwire_process::Command::new("sleep");
            command.arg("60").inherit_os_env();
            let child = command.spawn().expect("spawn sleep");
            let pid = child.id().expect("pid");
            assert!(is_alive(pid));
            let stopped = child
                .stop(agentwire_process::StopPlan::new().stdin_grace(Duration::ZERO))
                .await;
            assert_eq!(stopped.status.signal, Some(15), "{stopped:?}");
            // Reaped by agentwire-process: kill(pid, 0) says ESRCH.
            assert!(wait_gone(pid, Duration::from_secs(30)).await);
        });
    }

    /// A zombie needs a child nobody reaps, which `agentwire-process` never leaves behind; so this one test builds
    /// a `std::process::Command` itself and reaps it by hand.
    #[test]
    #[cfg(target_os = "linux")]
    #[allow(clippy::disallowed_methods)]
    fn an_unreaped_exited_child_is_a_zombie_and_counts_as_gone_on_linux() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exit 0"])
            .spawn()
            .expect("spawn sh");
        let pid = child.id();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        assert!(rt.block_on(wait_gone(pid, Duration::from_secs(30))));
        assert!(is_zombie(pid), "exited, not reaped yet");
        child.wait().expect("reap");
        assert!(!is_alive(pid));
    }
}
