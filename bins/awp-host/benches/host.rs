//! Custom bench (harness = false) of the host: per-turn overhead vs a bare pipe, rendered events/s, resident
//! memory with 100 stored threads and one live conversation. Writes `$AGENTWIRE_BENCH_OUT/awp-host.md`
//! (default `target/bench-results/`).
//!
//! Needs the fixture agent built in the same profile: `cargo build --release -p agentwire-fixture-agents`.

#![allow(clippy::unwrap_used)] // A bench aborts on any setup failure; there is no caller to report to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentwire_awp::{ContentBlock, user_line};
use agentwire_host::agents::{AgentRegistry, AgentSpec};
use agentwire_host::store::{
    NewRun, RunEnd, RunStatus, Store, StoreConfig, Synchronous, ThreadChoice,
};
use agentwire_host::turn::{TurnOptions, TurnRequest, run_turn};
use agentwire_process::{Command, StdoutItem};

const TURNS: usize = 40;
const STREAM_DELTAS: usize = 20_000;

fn fixture() -> PathBuf {
    agentwire_testkit::bin_path("awp-fixture")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p90(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 9) / 10]
}

fn write_agents(config: &Path, lines: &str) {
    std::fs::create_dir_all(config).unwrap();
    std::fs::write(
        config.join("agents.toml"),
        lines.replace("$FIXTURE", &fixture().display().to_string()),
    )
    .unwrap();
}

/// Baseline: spawn the fixture, write the turn line, read frames until `result`, close stdin, wait.
async fn bare_pipe_turn(args: &[&str]) -> usize {
    let mut cmd = Command::new(fixture());
    cmd.args(args)
        .inherit_os_env()
        .stdout_jsonl(agentwire_jsonl::Limits::default());
    let mut child = cmd.spawn().expect("spawn fixture");
    let mut stdout = child.take_stdout().unwrap();
    child
        .stdin()
        .write_line(&user_line(&[ContentBlock::text("hi")]))
        .await
        .expect("write");
    let mut frames = 0;
    while let Some(item) = stdout.next().await {
        if let StdoutItem::Frame(agentwire_jsonl::Frame::Json(bytes)) = item {
            frames += 1;
            if bytes.windows(15).any(|w| w == b"\"type\":\"result\"") {
                break;
            }
        }
    }
    child.stdin().close().await;
    child.wait().await;
    frames
}

async fn turn_overhead(out: &mut String, tmp: &Path) {
    let config = tmp.join("config-turn");
    write_agents(
        &config,
        "[[agents]]\nname = \"fx\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"normal\"]\n",
    );
    let registry = AgentRegistry::load(&config, &|_| None, None).unwrap();
    let agent = registry.resolve(Some("fx")).unwrap().clone();
    let mut full = Store::open(&tmp.join("data-turn-full")).unwrap();
    let normal_config = StoreConfig {
        synchronous: Synchronous::Normal,
        ..StoreConfig::default()
    };
    let mut normal = Store::open_with(&tmp.join("data-turn-normal"), normal_config).unwrap();
    let options = TurnOptions::default();
    let (mut ours_full, mut ours_normal, mut base) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..TURNS + 3 {
        let d_full = timed_turn(&mut full, &agent, &options).await;
        let d_normal = timed_turn(&mut normal, &agent, &options).await;
        let t = Instant::now();
        bare_pipe_turn(&["--mode", "normal"]).await;
        let b = t.elapsed();
        if i >= 3 {
            ours_full.push(d_full);
            ours_normal.push(d_normal);
            base.push(b);
        }
    }
    let m_base = median(base.clone());
    let row = |name: &str, v: Vec<Duration>| {
        let m = median(v.clone());
        format!(
            "| {name} | {m:.2?} | {:.2?} | {:.2}× |\n",
            p90(v),
            m.as_secs_f64() / m_base.as_secs_f64()
        )
    };
    writeln!(
        out,
        "\n### One trivial turn (spawn, turn, stop), {TURNS} runs each, interleaved\n"
    )
    .unwrap();
    out.push_str(
        "| implementation | median | p90 | ratio vs baseline (goal ≤ 1.2×) |\n|---|---|---|---|\n",
    );
    out.push_str(&row(
        "agentwire-host `run_turn`, SQLite WAL synchronous=FULL (default; 3 commits per turn)",
        ours_full,
    ));
    out.push_str(&row(
        "agentwire-host `run_turn`, SQLite WAL synchronous=NORMAL",
        ours_normal,
    ));
    out.push_str(&row(
        "baseline: bare pipe to awp-fixture (write line, read to `result`, close, wait)",
        base,
    ));
}

async fn timed_turn(store: &mut Store, agent: &AgentSpec, options: &TurnOptions) -> Duration {
    let request = TurnRequest {
        thread: None,
        model: None,
        prompt: "hi".into(),
        attachments: Vec::new(),
        title: None,
    };
    let t = Instant::now();
    let report = run_turn(
        store,
        agent,
        request,
        options,
        &mut |_| {},
        std::future::pending(),
    )
    .await
    .unwrap();
    let d = t.elapsed();
    assert_eq!(report.status, RunStatus::Succeeded);
    d
}

async fn run_host(data: &Path, config: &Path, args: &[&str]) -> (i32, Vec<u8>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_awp-host"));
    cmd.arg("--data-dir")
        .arg(data)
        .arg("--config-dir")
        .arg(config)
        .args(args)
        .inherit_os_env();
    let mut child = cmd.spawn().expect("spawn awp-host");
    child.stdin().close().await;
    let mut stdout = child.take_stdout().unwrap();
    let mut bytes = Vec::new();
    while let Some(item) = stdout.next().await {
        if let StdoutItem::Bytes(b) = item {
            bytes.extend_from_slice(&b);
        }
    }
    (child.wait().await.code_or_signal(), bytes)
}

async fn events_per_second(out: &mut String, tmp: &Path) {
    let recording = tmp.join("stream.jsonl");
    let mut text = String::from(
        "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"bench-1\",\"model\":\"m\"}\n",
    );
    text.push_str("{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n");
    for i in 0..STREAM_DELTAS {
        writeln!(text, "{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word{i} \"}}}}").unwrap();
    }
    text.push_str("{\"type\":\"content_block_stop\",\"index\":0}\n");
    text.push_str("{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"session_id\":\"bench-1\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n");
    std::fs::write(&recording, text).unwrap();
    let config = tmp.join("config-stream");
    let rec = recording.display().to_string();
    write_agents(
        &config,
        &format!(
            "[[agents]]\nname = \"rp\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"replay\", \"--replay-file\", \"{rec}\"]\n"
        ),
    );
    let data = tmp.join("data-stream");
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        let (code, bytes) =
            run_host(&data, &config, &["chat", "--agent", "rp", "--jsonl", "go"]).await;
        ours.push(t.elapsed());
        assert_eq!(code, 0);
        assert_eq!(
            bytes.iter().filter(|b| **b == b'\n').count(),
            STREAM_DELTAS + 2
        );
        let t = Instant::now();
        let frames = bare_pipe_turn(&["--mode", "replay", "--replay-file", &rec]).await;
        base.push(t.elapsed());
        assert_eq!(frames, STREAM_DELTAS + 4);
    }
    let events = STREAM_DELTAS as f64 + 2.0;
    let ours_rate = events / median(ours).as_secs_f64();
    let base_rate = (STREAM_DELTAS as f64 + 4.0) / median(base).as_secs_f64();
    writeln!(
        out,
        "\n### Streaming {STREAM_DELTAS} text deltas (median of 5)\n"
    )
    .unwrap();
    writeln!(
        out,
        "| implementation | events/s | ratio vs baseline |\n|---|---|---|"
    )
    .unwrap();
    writeln!(out, "| `awp-host chat --jsonl` (whole process: start, store, normalize, render, persist, stop) | {ours_rate:.0} | {:.2}× |", ours_rate / base_rate).unwrap();
    writeln!(
        out,
        "| baseline: bare pipe, fixture lines framed by agentwire-jsonl | {base_rate:.0} | 1.00× |"
    )
    .unwrap();
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn resident_memory(out: &mut String, tmp: &Path) {
    let data = tmp.join("data-rss");
    {
        let mut store = Store::open(&data).unwrap();
        for i in 0..100 {
            let prompt = format!(
                "thread number {i}: {}",
                "some earlier prompt text ".repeat(20)
            );
            let guard = store
                .begin_run(NewRun {
                    thread: ThreadChoice::New {
                        agent: "quiet".into(),
                    },
                    agent: "quiet",
                    model: None,
                    prompt: &prompt,
                    resumed_session_id: None,
                    title: None,
                    cwd: None,
                })
                .unwrap();
            store.record_session_id(&guard, &format!("s-{i}")).unwrap();
            store
                .append_assistant_text(&guard, None, &"an earlier answer ".repeat(50))
                .unwrap();
            store
                .finish_run(
                    guard,
                    &RunEnd {
                        status: RunStatus::Succeeded,
                        usage: None,
                        error_code: None,
                        error_reason: None,
                        total_cost_usd: None,
                        pending_text: None,
                    },
                )
                .unwrap();
        }
    }
    let config = tmp.join("config-rss");
    write_agents(
        &config,
        "[[agents]]\nname = \"quiet\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"silence\"]\n",
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_awp-host"));
    cmd.arg("--data-dir")
        .arg(&data)
        .arg("--config-dir")
        .arg(&config)
        .args(["chat", "--agent", "quiet", "--jsonl", "live"])
        .inherit_os_env();
    let mut child = cmd.spawn().expect("spawn awp-host");
    let mut stdout = child.take_stdout().unwrap();
    let mut seen = Vec::new();
    while let Some(item) = stdout.next().await {
        if let StdoutItem::Bytes(b) = item {
            seen.extend_from_slice(&b);
        }
        if String::from_utf8_lossy(&seen).contains("text_delta") {
            break;
        }
    }
    let host_pid = child.id().unwrap();
    let host_rss = rss_kib(host_pid);
    // The agent is the host's only child: find it through /proc.
    let agent_rss = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .map(|rest| rest.split_whitespace().nth(1) == Some(&host_pid.to_string()))
                })
                .unwrap_or(false)
        })
        .map(rss_kib)
        .unwrap_or(0);
    let pid = rustix::process::Pid::from_raw(i32::try_from(host_pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    while stdout.next().await.is_some() {}
    child.wait().await;
    let mib = |k: u64| k as f64 / 1024.0;
    writeln!(
        out,
        "\n### Resident memory, 100 threads stored, one live conversation\n"
    )
    .unwrap();
    writeln!(
        out,
        "| process | VmRSS | ratio vs baseline |\n|---|---|---|"
    )
    .unwrap();
    writeln!(
        out,
        "| awp-host chat (goal ≤ 30 MiB) | {:.1} MiB | {:.2}× |",
        mib(host_rss),
        host_rss as f64 / agent_rss.max(1) as f64
    )
    .unwrap();
    writeln!(
        out,
        "| baseline: the awp-fixture agent it drives | {:.1} MiB | 1.00× |",
        mib(agent_rss)
    )
    .unwrap();
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut out = String::from("## awp-host\n");
    rt.block_on(async {
        turn_overhead(&mut out, tmp.path()).await;
        events_per_second(&mut out, tmp.path()).await;
        resident_memory(&mut out, tmp.path()).await;
    });
    // Smoke run (no `--bench`: `cargo test --bench host`, as `cargo xtask ci` does): checked to run, not written.
    if !std::env::args().any(|a| a == "--bench") {
        print!("smoke run (no --bench argument), not written:\n{out}");
        return;
    }
    let dir = std::env::var_os("AGENTWIRE_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-results")
        });
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("awp-host.md"), &out).unwrap();
    print!("{out}");
}
