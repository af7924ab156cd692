//! Completion, the stop ladder, group kills and exit statuses, with real child processes.

mod common;

use std::time::Duration;

use agentwire_process::{
    CancellationToken, ChildConfig, ExitStatus, StdoutEnd, StopStep, WaitOutcome,
};
use common::{guard, plan, read_line, read_to_end, sh, wait_gone};

#[tokio::test]
async fn grandchild_holding_stdout_cannot_delay_completion_past_the_drain_window() {
    let mut child = sh("sleep 60 & echo hi")
        .drain_window(Duration::from_millis(200))
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let stderr = child.stderr_tail();

    let (out, end) = read_to_end(&mut stdout).await;
    assert_eq!(out, b"hi\n");
    // The stream ends at the drain deadline: either the reader notices the deadline first (DrainWindowElapsed) or
    // the orphan killed at that deadline closes the pipe first (Eof). Both end long before the grandchild's 60 s
    // sleep, which `read_to_end`'s guard bounds; which one wins is a race on a loaded machine.
    assert!(
        matches!(end, StdoutEnd::DrainWindowElapsed | StdoutEnd::Eof),
        "unexpected end: {end:?}"
    );
    assert_eq!(guard("wait", child.wait()).await.code, Some(0));
    guard("stderr collection", stderr.finished()).await;
    assert!(stderr.is_finished());

    let outcome = guard("stop", child.stop(plan(100, 100))).await;
    assert_eq!(outcome.ended_by, StopStep::AlreadyExited);
}

#[tokio::test]
async fn stdout_ends_at_eof_when_nobody_holds_the_pipe() {
    let mut child = sh("echo a; echo b").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let (out, end) = read_to_end(&mut stdout).await;
    assert_eq!((out.as_slice(), end), (&b"a\nb\n"[..], StdoutEnd::Eof));
    assert!(guard("wait", child.wait()).await.success());
}

#[tokio::test]
async fn stop_kills_grandchildren_in_the_group() {
    let mut child = sh("sleep 60 & echo $!; wait").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let grandchild: i32 = read_line(&mut stdout, &mut Vec::new())
        .await
        .parse()
        .unwrap();
    let direct = i32::try_from(child.id().unwrap()).unwrap();

    let outcome = guard("stop", child.stop(plan(100, 10_000))).await;
    assert_eq!(
        outcome.ended_by,
        StopStep::Sigterm,
        "sh in `wait` dies on SIGTERM"
    );
    assert_eq!(outcome.status.signal, Some(15));
    wait_gone(grandchild).await;
    wait_gone(direct).await;
}

#[tokio::test]
async fn child_exiting_on_stdin_eof_ends_with_stdin_closed_and_its_group_is_killed() {
    // The grandchild ignores SIGTERM and does not read stdin: only the final group SIGKILL ends it.
    let script = "(trap '' TERM; exec sleep 60) & echo $!; read line; exit 3";
    let mut child = sh(script).spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let grandchild: i32 = read_line(&mut stdout, &mut Vec::new())
        .await
        .parse()
        .unwrap();

    let outcome = guard("stop", child.stop(plan(10_000, 10_000))).await;
    assert_eq!(outcome.ended_by, StopStep::StdinClosed);
    assert_eq!(outcome.status.code, Some(3));
    wait_gone(grandchild).await;
}

#[tokio::test]
async fn final_stdin_line_is_written_before_eof() {
    let mut child = sh(r#"read line; echo "got:$line"; cat >/dev/null"#)
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let outcome = guard(
        "stop",
        child.stop(plan(10_000, 10_000).final_stdin_line(r#"{"type":"shutdown"}"#)),
    )
    .await;
    assert_eq!(outcome.ended_by, StopStep::StdinClosed);
    let (out, _) = read_to_end(&mut stdout).await;
    assert_eq!(out, b"got:{\"type\":\"shutdown\"}\n");
}

#[tokio::test]
async fn child_ignoring_sigterm_is_killed_by_sigkill() {
    let mut child = sh("trap '' TERM; echo ready; exec sleep 60")
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");

    let outcome = guard("stop", child.stop(plan(100, 200))).await;
    assert_eq!(outcome.ended_by, StopStep::Sigkill);
    assert_eq!(
        outcome.status,
        ExitStatus {
            code: None,
            signal: Some(9)
        }
    );
    assert_eq!(outcome.status.code_or_signal(), 137);
}

#[tokio::test]
async fn stop_is_idempotent_and_concurrent_calls_agree() {
    let mut child = sh("echo ready; exec sleep 60").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");

    let other = child.handle();
    let concurrent = tokio::spawn(async move { other.stop(plan(100, 10_000)).await });
    let first = guard("stop", child.stop(plan(100, 10_000))).await;
    let second = guard("second stop", child.stop(plan(0, 0))).await;
    let third = guard("concurrent stop", concurrent).await.unwrap();
    assert_eq!(first.ended_by, StopStep::Sigterm);
    assert_eq!(first, second);
    assert_eq!(first, third);
}

/// Runs `script`, waits for its exit and checks the status, its 128+n form and its display.
async fn check_exit(script: &str, expect: ExitStatus, expect_number: i32, expect_text: &str) {
    let child = sh(script).spawn().expect("spawn");
    let status = guard("wait", child.wait()).await;
    assert_eq!(status, expect, "{script}");
    assert_eq!(status.code_or_signal(), expect_number, "{script}");
    assert_eq!(status.to_string(), expect_text, "{script}");
    assert_eq!(child.try_wait(), Some(status));
    assert_eq!(child.id(), None, "no pid once the exit is observed");
}

#[tokio::test]
async fn exit_status_reports_code_or_signal_as_128_plus_n() {
    check_exit(
        "exit 0",
        ExitStatus {
            code: Some(0),
            signal: None,
        },
        0,
        "exit code 0",
    )
    .await;
    check_exit(
        "exit 3",
        ExitStatus {
            code: Some(3),
            signal: None,
        },
        3,
        "exit code 3",
    )
    .await;
    check_exit(
        "kill -KILL $$",
        ExitStatus {
            code: None,
            signal: Some(9),
        },
        137,
        "killed by signal 9",
    )
    .await;
    check_exit(
        "kill -TERM $$",
        ExitStatus {
            code: None,
            signal: Some(15),
        },
        143,
        "killed by signal 15",
    )
    .await;
}

#[tokio::test]
async fn dropping_a_running_child_kills_its_whole_group() {
    let mut child = sh("sleep 60 & echo $!; wait").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let grandchild: i32 = read_line(&mut stdout, &mut Vec::new())
        .await
        .parse()
        .unwrap();
    let direct = i32::try_from(child.id().unwrap()).unwrap();
    drop(child);
    wait_gone(grandchild).await;
    wait_gone(direct).await;
}

#[tokio::test]
async fn wait_or_stop_reports_exit_timeout_and_cancellation() {
    let never = CancellationToken::new();

    let child = sh("exit 7").spawn().expect("spawn");
    let outcome = guard("exit", child.wait_or_stop(&never, None, plan(100, 100))).await;
    assert_eq!(
        outcome,
        WaitOutcome::Exited(ExitStatus {
            code: Some(7),
            signal: None
        })
    );

    let mut child = sh("echo ready; exec sleep 60").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");
    let outcome = guard(
        "timeout",
        child.wait_or_stop(&never, Some(Duration::from_millis(50)), plan(50, 10_000)),
    )
    .await;
    match outcome {
        WaitOutcome::TimedOut(stop) => assert_eq!(stop.ended_by, StopStep::Sigterm),
        other => panic!("expected a timeout, got {other:?}"),
    }

    let mut child = sh("echo ready; exec sleep 60").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let outcome = guard(
        "cancel",
        child.wait_or_stop(&cancel, None, plan(50, 10_000)),
    )
    .await;
    match outcome {
        WaitOutcome::Cancelled(stop) => assert_eq!(stop.status.signal, Some(15)),
        other => panic!("expected a cancellation, got {other:?}"),
    }
    assert_eq!(outcome.status().code_or_signal(), 143);
}

#[tokio::test]
async fn orphans_are_killed_when_the_drain_window_ends() {
    let mut child = sh("sleep 60 & echo $!")
        .drain_window(Duration::from_millis(100))
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let grandchild: i32 = read_line(&mut stdout, &mut Vec::new())
        .await
        .parse()
        .unwrap();
    assert!(guard("wait", child.wait()).await.success());
    wait_gone(grandchild).await; // no stop, no drop: the drain window's end killed it
    drop(child);
}

#[tokio::test]
async fn orphans_live_until_stop_when_the_drain_kill_is_off() {
    let config = ChildConfig {
        drain_window: Duration::from_millis(50),
        kill_orphans_after_drain: false,
        ..ChildConfig::default()
    };
    let mut child = sh("sleep 60 & echo $!")
        .config(config)
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let grandchild: i32 = read_line(&mut stdout, &mut Vec::new())
        .await
        .parse()
        .unwrap();
    guard("wait", child.wait()).await;
    guard("stderr drain window", child.stderr_tail().finished()).await;
    assert!(
        !common::is_gone(grandchild),
        "the grandchild outlives the drain window"
    );
    let outcome = guard("stop", child.stop(plan(0, 0))).await;
    assert_eq!(outcome.ended_by, StopStep::AlreadyExited);
    wait_gone(grandchild).await;
}

#[tokio::test]
async fn stop_is_not_blocked_by_a_stuck_stdin_writer() {
    let mut child = sh("echo ready; exec sleep 60").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");
    let stdin = child.stdin();
    let writer = tokio::spawn(async move { stdin.write_all(&vec![b'x'; 1 << 20]).await });
    let outcome = guard("stop", child.stop(plan(50, 10_000))).await;
    assert_eq!(outcome.ended_by, StopStep::Sigterm);
    match guard("writer", writer).await.unwrap() {
        Err(err) => assert_eq!(err.code(), "stdin_closed"),
        Ok(()) => panic!("a 1 MiB write to a child that never reads cannot succeed"),
    }
}

/// Hazard: SIGTERM right after stdin EOF lost Claude Code's session tail (it flushes its session file after stdin
/// EOF). The ladder waits.
#[tokio::test]
async fn stop_lets_the_child_finish_after_stdin_eof_before_any_sigterm() {
    let script = "trap 'echo term; exit 1' TERM; echo ready; cat >/dev/null; echo flushed";
    let mut child = sh(script).spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let mut rest = Vec::new();
    assert_eq!(read_line(&mut stdout, &mut rest).await, "ready");
    let outcome = guard("stop", child.stop(plan(10_000, 10_000))).await;
    assert_eq!(
        (outcome.ended_by, outcome.status.code),
        (StopStep::StdinClosed, Some(0))
    );
    let (out, _) = read_to_end(&mut stdout).await;
    rest.extend_from_slice(&out);
    assert_eq!(String::from_utf8_lossy(&rest), "flushed\n");
}

#[tokio::test]
async fn stdin_grace_of_duration_max_waits_for_the_exit_without_overflowing() {
    let child = sh("cat >/dev/null; exit 4").spawn().expect("spawn");
    let plan = plan(0, 0).stdin_grace(Duration::MAX);
    let outcome = guard("stop", child.stop(plan)).await;
    assert_eq!(
        (outcome.ended_by, outcome.status.code),
        (StopStep::StdinClosed, Some(4))
    );
}

#[tokio::test]
async fn term_grace_of_duration_max_waits_for_the_exit_after_sigterm() {
    let mut child = sh("echo ready; exec sleep 60").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");
    let outcome = guard("stop", child.stop(plan(50, 0).term_grace(Duration::MAX))).await;
    assert_eq!(
        (outcome.ended_by, outcome.status.signal),
        (StopStep::Sigterm, Some(15))
    );
}

#[tokio::test]
async fn drain_window_of_duration_max_never_ends_but_stop_still_kills_the_orphans() {
    let config = ChildConfig {
        drain_window: Duration::MAX,
        ..ChildConfig::default()
    };
    // Without a grandchild: stdout ends at EOF as usual.
    let mut child = sh("echo hi").config(config.clone()).spawn().expect("spawn");
    let (out, end) = read_to_end(&mut child.take_stdout().expect("stdout")).await;
    assert_eq!((out.as_slice(), end), (&b"hi\n"[..], StdoutEnd::Eof));
    assert!(guard("wait", child.wait()).await.success());
    guard("stderr at eof", child.stderr_tail().finished()).await;

    // With a grandchild holding the pipes: the window never ends, so the stop's group kill ends them.
    let mut child = sh("sleep 60 & echo $!")
        .config(config)
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let grandchild: i32 = read_line(&mut stdout, &mut Vec::new())
        .await
        .parse()
        .unwrap();
    assert!(guard("wait", child.wait()).await.success());
    assert!(!common::is_gone(grandchild), "no drain-window kill");
    let outcome = guard("stop", child.stop(plan(0, 0))).await;
    assert_eq!(outcome.ended_by, StopStep::AlreadyExited);
    wait_gone(grandchild).await;
    let (rest, end) = read_to_end(&mut stdout).await;
    assert_eq!(
        (rest.as_slice(), end),
        (&b""[..], StdoutEnd::Eof),
        "the readers survived the window and saw the pipe close"
    );
    guard("stderr at eof", child.stderr_tail().finished()).await;
}

#[tokio::test]
async fn wait_or_stop_timeout_of_duration_max_never_elapses() {
    let never = CancellationToken::new();
    let child = sh("exit 7").spawn().expect("spawn");
    let outcome = guard(
        "exit",
        child.wait_or_stop(&never, Some(Duration::MAX), plan(100, 100)),
    )
    .await;
    assert_eq!(outcome.status().code, Some(7));
    assert!(matches!(outcome, WaitOutcome::Exited(_)), "{outcome:?}");

    let mut child = sh("echo ready; exec sleep 60").spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let max_plan = plan(0, 0)
        .stdin_grace(Duration::from_millis(50))
        .term_grace(Duration::MAX);
    let outcome = guard(
        "cancel",
        child.wait_or_stop(&cancel, Some(Duration::MAX), max_plan),
    )
    .await;
    match outcome {
        WaitOutcome::Cancelled(stop) => assert_eq!(stop.ended_by, StopStep::Sigterm),
        other => panic!("expected a cancellation, got {other:?}"),
    }
}
