//! Updates for sessions that were never created: a scripted agent sends 100 large `session/update`s for unknown
//! session ids, outside and during a `session/new`; the client drops and counts them instead of buffering them, so
//! its memory stays bounded (checked on the process's peak RSS where `/proc` exists), and the real session's
//! updates sent right after the `session/new` answer still arrive.
//!
//! One test per binary: the RSS check measures the whole process.

mod support;

use agentwire_acp::{ClientBuilder, ClientConfig};
use serde_json::{Value, json};
use support::within;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// Updates sent for unknown sessions in each phase.
const GHOSTS: usize = 100;

/// Text bytes per update (each line is a little larger).
const UPDATE_BYTES: usize = 1024 * 1024;

/// The bound the client keeps for unregistered sessions in this test.
const KEPT_BYTES: usize = 8 * 1024 * 1024;

fn update_line(session: &str, text: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": session,
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text}
            }
        }
    }))
    .expect("json");
    line.push(b'\n');
    line
}

fn answer_line(id: &Value, result: Value) -> Vec<u8> {
    let mut line =
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).expect("json");
    line.push(b'\n');
    line
}

/// The peak resident set size of this process, in bytes (`VmHWM`). Linux only (std has no portable peak-RSS
/// query): elsewhere the memory bound is not checked and the drop counters are the test's evidence.
#[cfg(target_os = "linux")]
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_for_sessions_never_created_are_dropped_and_counted_not_buffered() {
    #[cfg(target_os = "linux")]
    let rss_before = peak_rss();
    let (client_io, agent_io) = tokio::io::duplex(1 << 20);
    let (client_read, client_write) = tokio::io::split(client_io);
    let (agent_read, mut agent_write) = tokio::io::split(agent_io);
    let config = ClientConfig {
        max_unrouted_bytes: KEPT_BYTES,
        ..ClientConfig::default()
    };
    let client = ClientBuilder::new()
        .config(config)
        .connect(client_read, client_write);
    let agent = tokio::spawn(async move {
        let big = "x".repeat(UPDATE_BYTES);
        let mut lines = BufReader::new(agent_read).lines();
        while let Some(line) = lines.next_line().await.expect("read") {
            let message: Value = serde_json::from_str(&line).expect("client sends JSON");
            let id = message["id"].clone();
            match message["method"].as_str() {
                Some("initialize") => {
                    // Phase 1: no session is being created; every update names a session never created.
                    for n in 0..GHOSTS {
                        agent_write
                            .write_all(&update_line(&format!("ghost-{n}"), &big))
                            .await
                            .expect("write");
                    }
                    let answer = json!({"protocolVersion": 1, "agentCapabilities": {}});
                    agent_write
                        .write_all(&answer_line(&id, answer))
                        .await
                        .expect("write");
                }
                Some("session/new") => {
                    // Phase 2: while the session is being created, 100 more for unknown ids, then the answer and
                    // the real session's first update right behind it.
                    for n in 0..GHOSTS {
                        agent_write
                            .write_all(&update_line(&format!("phantom-{n}"), &big))
                            .await
                            .expect("write");
                    }
                    agent_write
                        .write_all(&answer_line(&id, json!({"sessionId": "real"})))
                        .await
                        .expect("write");
                    agent_write
                        .write_all(&update_line("real", "first"))
                        .await
                        .expect("write");
                }
                _ => {}
            }
        }
    });
    within(client.initialize()).await.expect("initialize");
    client.routed().await;
    assert_eq!(client.stats().unrouted_updates_dropped, GHOSTS as u64);
    let mut session = within(client.new_session(std::path::Path::new("/tmp")))
        .await
        .expect("session/new");
    let first = within(session.next_update())
        .await
        .expect("the real session's update");
    assert_eq!(first.agent_text(), Some("first"));
    // Every update for an unknown id is dropped and counted: those kept during the creation too, once it ended.
    assert_eq!(client.stats().unrouted_updates_dropped, 2 * GHOSTS as u64);
    #[cfg(target_os = "linux")]
    {
        // 200 updates of 1 MiB went through; buffering them would hold 200 MiB. The client may hold the bounded
        // buffer (8 MiB) plus a few lines in flight.
        let grown = peak_rss().saturating_sub(rss_before);
        assert!(
            grown < 96 * 1024 * 1024,
            "peak RSS grew by {} MiB",
            grown / (1024 * 1024)
        );
    }
    client.close().await;
    within(agent).await.expect("agent task");
}
