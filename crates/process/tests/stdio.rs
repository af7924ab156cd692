//! The child's pipes with real processes: stdin writes, JSONL and raw stdout, the stderr tail, late drain.

mod common;

use std::time::Duration;

use agentwire_jsonl::{Frame, Limits};
use agentwire_process::{ChildConfig, Command, StdinError, StdoutEnd, StdoutItem};
use common::{guard, read_line, read_to_end, sh};

/// `printf '%s\n' lines…` (or without the final newline), stdout decoded as JSONL with `max_line_bytes`; checks the
/// frames, written as `json:<text>`, `invalid:<preview>[:unterminated]` or `too_long:<bytes>`.
async fn check_jsonl(lines: &[&str], final_newline: bool, max_line_bytes: usize, expect: &[&str]) {
    let format = if final_newline {
        r#"printf '%s\n' "$@""#
    } else {
        r#"printf '%s' "$@""#
    };
    let mut cmd = sh(format);
    cmd.arg("sh").args(lines).stdout_jsonl(Limits {
        max_line_bytes,
        ..Limits::default()
    });
    let mut child = cmd.spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let mut got = Vec::new();
    while let Some(item) = guard("reading frames", stdout.next()).await {
        got.push(match item {
            StdoutItem::Frame(Frame::Json(bytes)) => {
                format!("json:{}", String::from_utf8_lossy(&bytes))
            }
            StdoutItem::Frame(Frame::Invalid(line)) if line.unterminated => {
                format!("invalid:{}:unterminated", line.preview)
            }
            StdoutItem::Frame(Frame::Invalid(line)) => format!("invalid:{}", line.preview),
            StdoutItem::Frame(Frame::TooLong { bytes_discarded }) => {
                format!("too_long:{bytes_discarded}")
            }
            other => panic!("unexpected item {other:?}"),
        });
    }
    assert_eq!(got, expect, "lines {lines:?}");
    assert_eq!(stdout.end(), Some(&StdoutEnd::Eof));
    guard("wait", child.wait()).await;
}

#[tokio::test]
async fn jsonl_stdout_yields_banner_json_and_too_long_frames() {
    let long = format!(r#"{{"k":"{}"}}"#, "x".repeat(64));
    check_jsonl(
        &[
            "starting agent v1",
            r#"{"type":"system"}"#,
            &long,
            r#"{"type":"result"}"#,
        ],
        true,
        32,
        &[
            "invalid:starting agent v1",
            r#"json:{"type":"system"}"#,
            "too_long:72",
            r#"json:{"type":"result"}"#,
        ],
    )
    .await;
}

#[tokio::test]
async fn jsonl_line_at_the_limit_passes_and_one_byte_past_is_too_long() {
    let at_limit = format!(r#"{{"k":"{}"}}"#, "x".repeat(24)); // 32 bytes
    let past_limit = format!(r#"{{"k":"{}"}}"#, "x".repeat(25)); // 33 bytes
    assert_eq!((at_limit.len(), past_limit.len()), (32, 33));
    check_jsonl(
        &[&at_limit, &past_limit, "{}"],
        true,
        32,
        &[&format!("json:{at_limit}"), "too_long:33", "json:{}"],
    )
    .await;
}

#[tokio::test]
async fn jsonl_final_line_without_newline_is_returned_at_eof() {
    check_jsonl(
        &["{\"a\":1}\n{\"b\":"],
        false,
        32,
        &[r#"json:{"a":1}"#, r#"invalid:{"b"::unterminated"#],
    )
    .await;
    check_jsonl(
        &["{\"a\":1}\n{\"b\":2}"],
        false,
        32,
        &[r#"json:{"a":1}"#, r#"json:{"b":2}"#],
    )
    .await;
}

#[tokio::test]
async fn raw_stdout_delivers_every_byte_in_order() {
    let mut child = Command::new("head")
        .args(["-c", "1000000", "/dev/zero"])
        .inherit_os_env()
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let (out, end) = read_to_end(&mut stdout).await;
    assert_eq!((out.len(), end), (1_000_000, StdoutEnd::Eof));
    assert!(out.iter().all(|&b| b == 0));
    assert!(guard("wait", child.wait()).await.success());
}

#[tokio::test]
async fn stdin_lines_round_trip_and_clones_never_interleave() {
    let mut child = Command::new("cat").inherit_os_env().spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let writers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|tag| {
            let stdin = child.stdin();
            tokio::spawn(async move {
                for i in 0..200 {
                    stdin
                        .write_line(format!("{tag}-{i}-{}", "y".repeat(500)).as_bytes())
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        guard("writer", writer).await.unwrap();
    }
    child.stdin().write_line(b"last\n").await.unwrap(); // a trailing newline is not doubled
    child.stdin().close().await;
    let (out, end) = read_to_end(&mut stdout).await;
    assert_eq!(end, StdoutEnd::Eof);
    let text = String::from_utf8(out).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 401);
    assert_eq!(lines.last(), Some(&"last"));
    for line in &lines[..400] {
        let mut parts = line.splitn(3, '-');
        let (tag, _, pad) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        assert!(
            ["a", "b"].contains(&tag) && pad == "y".repeat(500),
            "interleaved line {line:?}"
        );
    }
}

/// Checks a stdin error and its stable code.
fn check_stdin_error(result: Result<(), StdinError>, expect_code: &str) {
    match result {
        Err(err) => assert_eq!(err.code(), expect_code, "{err}"),
        Ok(()) => panic!("expected {expect_code}, the write succeeded"),
    }
}

#[tokio::test]
async fn stdin_errors_are_typed() {
    let mut child = Command::new("cat").inherit_os_env().spawn().expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let stdin = child.stdin();
    match stdin.write_line(b"a\nb").await {
        Err(StdinError::NewlineInLine { position }) => assert_eq!(position, 1),
        other => panic!("expected NewlineInLine, got {other:?}"),
    }
    check_stdin_error(stdin.write_line(b"a\nb").await, "stdin_invalid_line");
    assert!(
        !stdin.is_closed(),
        "a rejected line writes nothing and keeps stdin open"
    );
    stdin.close().await;
    stdin.close().await; // idempotent
    check_stdin_error(stdin.write_line(b"late").await, "stdin_closed");
    let (out, _) = read_to_end(&mut stdout).await;
    assert!(
        out.is_empty(),
        "nothing of the rejected line was written: {out:?}"
    );
}

#[tokio::test]
async fn stdin_write_after_the_child_exited_is_a_typed_error_not_a_crash() {
    let child = sh("exit 0").spawn().expect("spawn");
    guard("wait", child.wait()).await;
    let stdin = child.stdin();
    check_stdin_error(stdin.write_all(&[b'x'; 8]).await, "stdin_broken_pipe");
    check_stdin_error(stdin.write_line(b"again").await, "stdin_closed");
    assert!(stdin.is_closed());
}

/// Writes `text` to stderr from a child with a tail of `capacity` bytes; checks the kept tail and the total.
async fn check_stderr(text: &str, capacity: usize, expect_kept: &str, expect_total: u64) {
    let mut cmd = sh(r#"printf '%s' "$1" >&2"#);
    cmd.arg("sh").arg(text).stderr_tail_bytes(capacity);
    let child = cmd.spawn().expect("spawn");
    guard("wait", child.wait()).await;
    let tail = child.stderr_tail();
    guard("stderr collection", tail.finished()).await;
    let (kept, total) = tail.snapshot();
    assert_eq!(
        (String::from_utf8_lossy(&kept).as_ref(), total),
        (expect_kept, expect_total),
        "capacity {capacity}"
    );
    assert_eq!(tail.tail_lossy(), expect_kept);
}

#[tokio::test]
async fn stderr_tail_keeps_the_last_bytes_at_the_limit_and_one_past() {
    check_stderr("abcd", 4, "abcd", 4).await;
    check_stderr("abcde", 4, "bcde", 5).await;
    check_stderr("", 4, "", 0).await;
}

#[tokio::test]
async fn stderr_tail_of_a_long_output_keeps_the_tail_and_counts_everything() {
    let script = r#"i=0; while [ $i -lt 2000 ]; do echo "line $i" >&2; i=$((i+1)); done"#;
    let child = sh(script).stderr_tail_bytes(1000).spawn().expect("spawn");
    guard("wait", child.wait()).await;
    let tail = child.stderr_tail();
    guard("stderr collection", tail.finished()).await;
    let expected: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    let (kept, total) = tail.snapshot();
    assert_eq!(total, expected.len() as u64);
    assert_eq!(&kept[..], &expected.as_bytes()[expected.len() - 1000..]);
}

#[tokio::test]
async fn stderr_tail_changed_wakes_on_new_bytes_and_at_the_end() {
    // The child writes `one`, blocks on stdin, writes `two` once a line arrives, then exits.
    let child = sh(r#"printf one >&2; read -r _; printf two >&2"#)
        .spawn()
        .expect("spawn");
    let tail = child.stderr_tail();
    guard("first bytes", tail.changed(0)).await;
    let (kept, total) = tail.snapshot();
    assert_eq!((&kept[..], total), (&b"one"[..], 3));
    // Nothing more can arrive while the child waits for stdin: one poll finds the wait pending.
    let pending = tokio::time::timeout(Duration::ZERO, tail.changed(total)).await;
    assert!(pending.is_err(), "changed resolved without new bytes");
    // A stale `seen` resolves at once.
    guard("stale seen", tail.changed(2)).await;
    child.stdin().write_line(b"go").await.expect("stdin");
    guard("second bytes", tail.changed(total)).await;
    let (kept, total) = tail.snapshot();
    assert_eq!((&kept[..], total), (&b"onetwo"[..], 6));
    // No more bytes: the wait ends when collection does.
    guard("end of stderr", tail.changed(total)).await;
    guard("wait", child.wait()).await;
    assert!(tail.is_finished());
}

/// A slow consumer and a grandchild holding stdout: the reader is stuck on a full queue when the drain window ends.
/// Output already in the pipe is still delivered afterwards, up to `late_drain_max_bytes`.
async fn check_late_drain(late_drain_max_bytes: usize, expect: &str) {
    // Before the window ends the reader must have read two chunks (one queued, one in hand): the window is a margin
    // a loaded machine cannot use up, not 50 ms that a late-scheduled reader would lose to the deadline.
    let config = ChildConfig {
        drain_window: Duration::from_secs(2),
        stdout_queue_items: 0, // treated as 1
        read_chunk_bytes: 4,
        late_drain_max_bytes,
        ..ChildConfig::default()
    };
    let mut child = sh("sleep 60 & printf aaaabbbbccccdddd")
        .config(config)
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    guard("wait", child.wait()).await;
    // The grandchild holds stderr too, so stderr finishing means the shared drain deadline has passed.
    guard("stderr drain window", child.stderr_tail().finished()).await;
    let (out, end) = read_to_end(&mut stdout).await;
    assert_eq!(
        (String::from_utf8_lossy(&out).as_ref(), end),
        (expect, StdoutEnd::DrainWindowElapsed)
    );
    guard("stop", child.stop(common::plan(0, 0))).await;
}

#[tokio::test]
async fn output_in_the_pipe_at_the_drain_deadline_is_delivered_up_to_the_late_budget() {
    // Concurrently: each waits out its own drain window.
    tokio::join!(
        check_late_drain(8, "aaaabbbbccccdddd"),
        check_late_drain(7, "aaaabbbbccccddd"),
        check_late_drain(0, "aaaabbbb"),
    );
}

#[tokio::test]
async fn dropping_stdout_lets_the_child_write_everything() {
    let mut child = Command::new("head")
        .args(["-c", "2000000", "/dev/zero"])
        .inherit_os_env()
        .spawn()
        .expect("spawn");
    drop(child.take_stdout());
    assert!(
        guard("wait", child.wait()).await.success(),
        "the child was not blocked or killed by EPIPE"
    );
}

#[tokio::test]
async fn readiness_line_is_read_before_the_rest() {
    let mut child = sh("echo ready; read x; echo after:$x")
        .spawn()
        .expect("spawn");
    let mut stdout = child.take_stdout().expect("stdout");
    let mut rest = Vec::new();
    assert_eq!(read_line(&mut stdout, &mut rest).await, "ready");
    child.stdin().write_line(b"go").await.unwrap();
    assert_eq!(read_line(&mut stdout, &mut rest).await, "after:go");
}

#[tokio::test]
async fn a_write_abandoned_half_way_closes_stdin() {
    use futures_util::FutureExt;
    let child = sh("exec sleep 60").spawn().expect("spawn");
    let stdin = child.stdin();
    // A first write makes the pipe known writable to the reactor (until then a write waits without writing).
    stdin.write_all(b"warm-up").await.unwrap();
    // The pipe takes its buffer's worth at once, then the write would wait: dropping it leaves a partial write.
    assert!(
        stdin
            .write_all(&vec![b'x'; 1 << 20])
            .now_or_never()
            .is_none()
    );
    assert!(
        stdin.is_closed(),
        "the rest of the write must never be glued to a later one"
    );
    check_stdin_error(stdin.write_line(b"next").await, "stdin_closed");
}

#[tokio::test]
async fn close_interrupts_a_blocked_write() {
    let child = sh("exec sleep 60").spawn().expect("spawn");
    let stdin = child.stdin();
    let writer = {
        let stdin = stdin.clone();
        tokio::spawn(async move { stdin.write_all(&vec![b'x'; 1 << 20]).await })
    };
    guard("close", stdin.close()).await;
    check_stdin_error(guard("writer", writer).await.unwrap(), "stdin_closed");
}

#[tokio::test]
async fn debug_of_child_and_its_handles_is_concise() {
    let mut child = sh("echo ready; read line; printf 'err-bytes' >&2")
        .spawn()
        .expect("spawn");
    let pid = child.id().expect("running");
    let mut stdout = child.take_stdout().expect("stdout");
    assert_eq!(read_line(&mut stdout, &mut Vec::new()).await, "ready");
    assert_eq!(
        format!("{child:?}"),
        format!("Child {{ pid: {pid}, state: \"running\", stdout_taken: true }}")
    );
    assert_eq!(
        format!("{:?}", child.handle()),
        format!("ChildHandle {{ pid: {pid}, state: \"running\" }}")
    );
    assert_eq!(format!("{:?}", child.stdin()), "Stdin { closed: false }");
    assert_eq!(format!("{stdout:?}"), "Stdout { end: None }");

    child.stdin().write_line(b"go").await.expect("write");
    assert!(guard("wait", child.wait()).await.success());
    let stderr = child.stderr_tail();
    guard("stderr", stderr.finished()).await;
    let (_, end) = read_to_end(&mut stdout).await;
    assert_eq!(end, StdoutEnd::Eof);
    assert_eq!(
        format!("{:?}", child.handle()),
        format!("ChildHandle {{ pid: {pid}, state: \"exited (exit code 0)\" }}")
    );
    assert_eq!(format!("{stdout:?}"), "Stdout { end: Some(Eof) }");
    assert_eq!(
        format!("{stderr:?}"),
        "StderrTail { kept_bytes: 9, total_bytes: 9, finished: true }"
    );
}
