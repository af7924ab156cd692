//! Helpers shared by the integration tests: shell children, line reading, hang guards, process liveness.
#![allow(dead_code)] // each test binary uses a different subset

use std::future::Future;
use std::time::Duration;

use agentwire_process::{Command, Stdout, StdoutEnd, StdoutItem, StopPlan};

/// Upper bound for any single awaited operation: a hang guard, never a speed assertion.
pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// Awaits `fut`, failing the test if it takes longer than [`HANG_GUARD`].
pub async fn guard<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, fut).await {
        Ok(out) => out,
        Err(_) => panic!("hang guard: {what} did not finish within {HANG_GUARD:?}"),
    }
}

/// `sh -c script` with the OS allowlist environment (shell children are allowed in tests only).
pub fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).inherit_os_env();
    cmd
}

/// Reads raw stdout until one complete line (without its `\n`); `rest` keeps bytes after it.
pub async fn read_line(stdout: &mut Stdout, rest: &mut Vec<u8>) -> String {
    loop {
        if let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = rest.drain(..=pos).collect();
            return String::from_utf8_lossy(&line[..pos]).into_owned();
        }
        match guard("reading a stdout line", stdout.next()).await {
            Some(StdoutItem::Bytes(bytes)) => rest.extend_from_slice(&bytes),
            Some(other) => panic!("expected raw bytes, got {other:?}"),
            None => panic!(
                "stdout ended ({:?}) before a full line; got {rest:?}",
                stdout.end()
            ),
        }
    }
}

/// Reads raw stdout to its end; returns the bytes and why it ended.
pub async fn read_to_end(stdout: &mut Stdout) -> (Vec<u8>, StdoutEnd) {
    let mut out = Vec::new();
    while let Some(item) = guard("reading stdout to its end", stdout.next()).await {
        match item {
            StdoutItem::Bytes(bytes) => out.extend_from_slice(&bytes),
            other => panic!("expected raw bytes, got {other:?}"),
        }
    }
    let end = stdout.end().cloned().expect("an ended stream says why");
    (out, end)
}

/// A stop plan with a short stdin grace and the given SIGTERM grace.
pub fn plan(stdin_grace_ms: u64, term_grace_ms: u64) -> StopPlan {
    StopPlan::default()
        .stdin_grace(Duration::from_millis(stdin_grace_ms))
        .term_grace(Duration::from_millis(term_grace_ms))
}

/// Whether `pid` no longer names a live process (gone, or a zombie waiting for its reaper where `/proc` can tell;
/// see `agentwire_testkit::proc` for the portable rules).
pub fn is_gone(pid: i32) -> bool {
    !agentwire_testkit::proc::is_alive(u32::try_from(pid).expect("positive pid"))
}

/// Waits until `pid` is gone. The kernel delivers SIGKILL and the reaper collects the process asynchronously and
/// there is no event to wait on for a process that is not our child, so this polls under the hang guard.
pub async fn wait_gone(pid: i32) {
    let pid = u32::try_from(pid).expect("positive pid");
    assert!(
        agentwire_testkit::proc::wait_gone(pid, HANG_GUARD).await,
        "hang guard: pid {pid} did not disappear within {HANG_GUARD:?}"
    );
}
