//! Custom bench (harness = false) of the local control plane (issue 7) and of tool calls (issue 9), each row
//! against a baseline measured in the same run:
//!
//! - `deepchat system status --json` whole-process time vs `/bin/true` and vs a Node.js client doing the same
//!   request (`benches/status.js`; skipped with a note when `node` is not on `PATH`);
//! - `cli.status` round trip p50/p99 through `agentwire_local_control::client::Client` vs the same client against
//!   a raw Unix-socket HTTP server that answers the same bytes without doing any work;
//! - `events.subscribe` records/s of a finished run (the hub's retained events) vs the same records from the raw
//!   server, plus the whole `deepchat run watch` process;
//! - artifact download MB/s (`runs.exportTranscript` of a run with large text, read by `Client::download`) vs `cp`
//!   of the same file;
//! - `awp-host tools call` of a `true` tool vs `/bin/true`, and `AppBundle::call` vs an `agentwire_process` spawn
//!   of `true`.
//!
//! Writes `$AGENTWIRE_BENCH_OUT/awp-host-control.md` (default `target/bench-results/`);
//! `AGENTWIRE_BENCH_QUICK=1` uses smaller counts. Run without `--bench` (`cargo test --bench control`, as
//! `cargo xtask ci` does) it is a smoke run: one or two of each, every check kept, nothing written. Needs `deepchat` and the fixture agents built in the same
//! profile: `cargo build --release -p deepchat -p agentwire-fixture-agents` (`cargo xtask bench` does it).

#![allow(clippy::unwrap_used)] // A bench aborts on any setup failure; there is no caller to report to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire_cli_driver::{AppBundle, CallContext};
use agentwire_local_control::client::Client;
use agentwire_local_control::descriptor::discover;
use agentwire_local_control::envelope::{
    ErrorCode, RequestEnvelope, ResponseEnvelope, StreamRecord,
};
use agentwire_process::{Child, Command, StdoutItem, StopPlan};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Counts of one run; `AGENTWIRE_BENCH_QUICK` picks the small set, a smoke run (no `--bench`) the smallest.
struct Sizes {
    processes: usize,
    round_trips: usize,
    stream_deltas: usize,
    stream_reps: usize,
    download_mib: usize,
    download_reps: usize,
    tool_calls: usize,
}

impl Sizes {
    fn pick(smoke: bool) -> Sizes {
        if smoke {
            // Every path once or twice, every check kept: it proves the bench still runs, measures nothing.
            Sizes {
                processes: 1,
                round_trips: 50,
                stream_deltas: 900,
                stream_reps: 1,
                download_mib: 1,
                download_reps: 1,
                tool_calls: 2,
            }
        } else if std::env::var_os("AGENTWIRE_BENCH_QUICK").is_some() {
            Sizes {
                processes: 15,
                round_trips: 300,
                stream_deltas: 900,
                stream_reps: 3,
                download_mib: 8,
                download_reps: 3,
                tool_calls: 40,
            }
        } else {
            Sizes {
                processes: 40,
                round_trips: 2000,
                stream_deltas: 900,
                stream_reps: 7,
                download_mib: 32,
                download_reps: 5,
                tool_calls: 150,
            }
        }
    }
}

fn quantile(values: &[Duration], q: f64) -> Duration {
    let mut v = values.to_vec();
    v.sort();
    let index = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[index.min(v.len() - 1)]
}

fn median(values: &[Duration]) -> Duration {
    quantile(values, 0.5)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// "met (x)" or "missed by …" for `value` against `goal` (`higher`: the goal is a minimum).
fn verdict(value: f64, goal: f64, higher: bool, unit: &str) -> String {
    let met = if higher { value >= goal } else { value <= goal };
    if met {
        format!("met ({value:.2} {unit})")
    } else {
        let by = if higher { goal / value } else { value / goal };
        format!("missed ({value:.2} {unit}, {by:.1}× off the goal)")
    }
}

fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// Runs a process to its exit with stdin closed and stdout drained; returns (wall time, exit code, stdout).
async fn run_process(mut cmd: Command) -> (Duration, i32, Vec<u8>) {
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    child.stdin().close().await;
    let mut stdout = child.take_stdout().unwrap();
    let mut bytes = Vec::new();
    while let Some(item) = stdout.next().await {
        if let StdoutItem::Bytes(b) = item {
            bytes.extend_from_slice(&b);
        }
    }
    let code = child.wait().await.code_or_signal();
    (started.elapsed(), code, bytes)
}

async fn timed_ok(cmd: Command) -> (Duration, Vec<u8>) {
    let (elapsed, code, out) = run_process(cmd).await;
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out));
    (elapsed, out)
}

fn command(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).inherit_os_env();
    cmd
}

struct Host {
    data: PathBuf,
    child: Child,
    client: Client,
}

impl Host {
    fn deepchat(&self, args: &[&str]) -> Command {
        let mut cmd = command(agentwire_testkit::bin_path("deepchat"), args);
        cmd.env("AWP_HOST_DATA_DIR", &self.data)
            .env_remove("DEEPCHAT_E2E_USER_DATA_DIR")
            .env_remove("DEEPCHAT_CLI_AGENT_TOKEN");
        cmd
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        let envelope = RequestEnvelope::new("bench-rpc", method, params);
        self.client.rpc(&envelope, TIMEOUT).await.unwrap()
    }

    /// Starts a detached run through the CLI and waits (by subscribing) until it is terminal.
    async fn finished_run(&self, agent: &str) -> String {
        let (_, out) = timed_ok(
            self.deepchat(&["agent", "run", "--agent", agent, "--prompt", "go", "--json"]),
        )
        .await;
        let envelope: Value = serde_json::from_slice(&out).unwrap();
        let run = envelope["result"]["runId"].as_str().unwrap().to_owned();
        // A live subscriber can fall behind a fast agent (queue of 256) and is then cut with a retriable
        // `unavailable`; subscribing again replays the retained events, until the terminal one has been seen.
        let envelope =
            RequestEnvelope::new("bench-wait", "events.subscribe", json!({"runId": run}));
        loop {
            match self.client.stream(&envelope, TIMEOUT, |_| {}).await {
                Ok(_) => return run,
                Err(e) if e.code() == ErrorCode::Unavailable => {}
                Err(e) => panic!("waiting for run {run}: {e}"),
            }
        }
    }

    async fn stop(self) {
        let plan = StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(Duration::from_secs(30));
        let outcome = self.child.stop(plan).await;
        assert_eq!(outcome.status.code_or_signal(), 0);
    }
}

/// `awp-host serve --console off` in a fresh data dir, once it printed its listening line.
async fn serve(tmp: &Path, agents: &str) -> Host {
    let data = tmp.join("data");
    let config = tmp.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("agents.toml"), agents).unwrap();
    let mut cmd = command(
        env!("CARGO_BIN_EXE_awp-host"),
        &["serve", "--console", "off"],
    );
    cmd.arg("--data-dir")
        .arg(&data)
        .arg("--config-dir")
        .arg(&config);
    let mut child = cmd.spawn().expect("spawn awp-host serve");
    let mut stdout = child.take_stdout().unwrap();
    let mut seen = Vec::new();
    while !seen.contains(&b'\n') {
        match stdout.next().await {
            Some(StdoutItem::Bytes(b)) => seen.extend_from_slice(&b),
            Some(_) => {}
            None => panic!("serve exited: {}", String::from_utf8_lossy(&seen)),
        }
    }
    assert!(
        seen.starts_with(b"awp-host: local control listening on "),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    tokio::spawn(async move { while stdout.next().await.is_some() {} });
    let descriptor = discover(&data).unwrap();
    let client = Client::from_descriptor(&descriptor, descriptor.token.clone()).unwrap();
    Host {
        data,
        child,
        client,
    }
}

/// `events.subscribe` of `run` from its first retained event; calls `on_record` per record, returns the count.
async fn subscribe(
    client: &Client,
    run: &str,
    on_record: &mut (dyn FnMut(StreamRecord) + Send),
) -> usize {
    let envelope = RequestEnvelope::new("bench-sub", "events.subscribe", json!({"runId": run}));
    let mut count = 0;
    client
        .stream(&envelope, TIMEOUT, |record| {
            count += 1;
            on_record(record);
        })
        .await
        .unwrap();
    count
}

/// What the raw baseline server answers: `POST /v1/rpc` with `rpc_result`, `POST /v1/stream` with `records`
/// and a terminal line, each under the request's own id.
struct Canned {
    rpc_result: Value,
    records: Vec<StreamRecord>,
    stream_result: Value,
}

/// The baseline: a Unix-socket HTTP/1.1 server that parses only the head and the envelope id, then writes the
/// canned answer and closes. No auth, routing table, policy, audit or store.
async fn raw_server(listener: UnixListener, canned: Arc<Canned>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let canned = canned.clone();
        tokio::spawn(async move {
            let _ = answer(stream, &canned).await;
        });
    }
}

async fn answer(mut stream: UnixStream, canned: &Canned) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let (head_end, length) = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let is_stream = buf.starts_with(b"POST /v1/stream ");
    let request: Value = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
    let id = request["id"].as_str().unwrap().to_owned();
    if is_stream {
        let mut out = Vec::from(
            &b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\n"
                [..],
        );
        for (sequence, record) in canned.records.iter().enumerate() {
            let mut record = record.clone();
            record.sequence = sequence as u64;
            record.request_id = Some(id.clone());
            serde_json::to_writer(&mut out, &record).unwrap();
            out.push(b'\n');
        }
        serde_json::to_writer(
            &mut out,
            &ResponseEnvelope::success(id, canned.stream_result.clone()),
        )
        .unwrap();
        out.push(b'\n');
        stream.write_all(&out).await?;
    } else {
        let body =
            serde_json::to_vec(&ResponseEnvelope::success(id, canned.rpc_result.clone())).unwrap();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
    }
    stream.shutdown().await
}

async fn status_process(out: &mut String, host: &Host, sizes: &Sizes) {
    let node = on_path("node");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/status.js");
    let (mut ours, mut truth, mut nodes) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..sizes.processes + 2 {
        let (d_ours, body) = timed_ok(host.deepchat(&["system", "status", "--json"])).await;
        let (d_true, _) = timed_ok(command("/bin/true", &[])).await;
        let d_node = match &node {
            Some(node) => {
                let mut cmd = command(node, &[]);
                cmd.arg(&script).env("AWP_HOST_DATA_DIR", &host.data);
                let (d, node_body) = timed_ok(cmd).await;
                assert!(String::from_utf8_lossy(&node_body).contains("\"ok\":true"));
                Some(d)
            }
            None => None,
        };
        assert!(String::from_utf8_lossy(&body).contains("\"ok\":true"));
        if i >= 2 {
            ours.push(d_ours);
            truth.push(d_true);
            nodes.extend(d_node);
        }
    }
    let m = median(&ours);
    writeln!(
        out,
        "\n### `deepchat system status --json`, whole process ({} runs each, interleaved)\n",
        sizes.processes
    )
    .unwrap();
    out.push_str("| process | median | p90 | ratio to `deepchat` |\n|---|---|---|---|\n");
    let row = |name: &str, v: &[Duration]| {
        format!(
            "| {name} | {} | {} | {:.2}× |\n",
            ms(median(v)),
            ms(quantile(v, 0.9)),
            median(v).as_secs_f64() / m.as_secs_f64()
        )
    };
    out.push_str(&row(
        "`deepchat system status --json` (spawn, discover, `cli.status`, print, exit; goal ≤ 5 ms)",
        &ours,
    ));
    out.push_str(&row("baseline: `/bin/true` (spawn and exit)", &truth));
    if nodes.is_empty() {
        out.push_str("| baseline: Node.js client (`benches/status.js`) | `node` is not on PATH: not measured | – | – |\n");
    } else {
        out.push_str(&row(
            "baseline: Node.js client doing the same request (`benches/status.js`; goal: ours ≥ 10× faster)",
            &nodes,
        ));
    }
    let overhead = m.saturating_sub(median(&truth));
    writeln!(
        out,
        "\nAbove the cost of starting any process (`/bin/true`), `deepchat` spends {} (median).",
        ms(overhead)
    )
    .unwrap();
    let absolute = verdict(m.as_secs_f64() * 1e3, 5.0, false, "ms");
    write!(out, "Goal ≤ 5 ms: {absolute}.").unwrap();
    if !nodes.is_empty() {
        let speedup = median(&nodes).as_secs_f64() / m.as_secs_f64();
        write!(
            out,
            " Goal ≥ 10× faster than Node: {}.",
            verdict(speedup, 10.0, true, "×")
        )
        .unwrap();
    }
    out.push('\n');
}

async fn round_trips(out: &mut String, host: &Host, sizes: &Sizes, raw: &Client) {
    let envelope = RequestEnvelope::new("bench-status", "cli.status", json!({}));
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let batch = 50;
    let warm = 50;
    for _ in 0..warm {
        host.client.rpc(&envelope, TIMEOUT).await.unwrap();
        raw.rpc(&envelope, TIMEOUT).await.unwrap();
    }
    while ours.len() < sizes.round_trips {
        for _ in 0..batch {
            let t = Instant::now();
            host.client.rpc(&envelope, TIMEOUT).await.unwrap();
            ours.push(t.elapsed());
        }
        for _ in 0..batch {
            let t = Instant::now();
            raw.rpc(&envelope, TIMEOUT).await.unwrap();
            base.push(t.elapsed());
        }
    }
    writeln!(
        out,
        "\n### `cli.status` round trip over the socket ({} calls each, batches of {batch} interleaved)\n",
        ours.len()
    )
    .unwrap();
    out.push_str("Both rows use `agentwire_local_control::client::Client` (a new connection per call, as the CLI).\n\n");
    out.push_str("| server | p50 | p99 | p50 ratio to baseline |\n|---|---|---|---|\n");
    let b50 = median(&base);
    writeln!(
        out,
        "| `awp-host serve` (auth, policy, audit, dispatch) | {} | {} | {:.2}× |",
        us(median(&ours)),
        us(quantile(&ours, 0.99)),
        median(&ours).as_secs_f64() / b50.as_secs_f64()
    )
    .unwrap();
    writeln!(
        out,
        "| baseline: raw Unix-socket HTTP server writing the same answer bytes | {} | {} | 1.00× |",
        us(b50),
        us(quantile(&base, 0.99))
    )
    .unwrap();
}

async fn stream_rate(out: &mut String, host: &Host, sizes: &Sizes, run: &str, raw: &Client) {
    let (mut ours, mut base, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    let mut records = 0;
    let mut bytes = 0usize;
    for _ in 0..sizes.stream_reps {
        let t = Instant::now();
        let n = subscribe(&host.client, run, &mut |r| {
            bytes += serde_json::to_vec(&r).map(|v| v.len() + 1).unwrap_or(0);
        })
        .await;
        ours.push(t.elapsed());
        let t = Instant::now();
        let m = subscribe(raw, run, &mut |_| {}).await;
        base.push(t.elapsed());
        assert_eq!(n, m);
        let (d, lines) = timed_ok(host.deepchat(&["run", "watch", "--run", run, "--jsonl"])).await;
        cli.push(d);
        assert!(lines.iter().filter(|b| **b == b'\n').count() >= n);
        records = n;
    }
    let per_rep = bytes / sizes.stream_reps.max(1);
    let rate = |d: Duration| records as f64 / d.as_secs_f64();
    let base_rate = rate(median(&base));
    writeln!(
        out,
        "\n### `events.subscribe` of a finished run: {records} records, {:.1} MiB per stream (median of {})\n",
        per_rep as f64 / (1024.0 * 1024.0),
        sizes.stream_reps
    )
    .unwrap();
    out.push_str("The run streamed its text as many small deltas; every `chat.stream.updated` record carries the message so far.\n\n");
    out.push_str("| reader ← server | records/s | ratio to baseline |\n|---|---|---|\n");
    let row = |name: &str, v: &[Duration]| {
        let r = rate(median(v));
        format!("| {name} | {r:.0} | {:.2}× |\n", r / base_rate)
    };
    out.push_str(&row(
        "`Client::stream` ← `awp-host serve` (hub replay)",
        &ours,
    ));
    out.push_str(&row(
        "`deepchat run watch --jsonl` whole process ← `awp-host serve`",
        &cli,
    ));
    out.push_str(&row(
        "baseline: `Client::stream` ← raw server writing the same records",
        &base,
    ));
}

async fn download_rate(out: &mut String, host: &Host, sizes: &Sizes, run: &str, tmp: &Path) {
    let target = tmp.join("download.bin");
    let copy = tmp.join("copy.bin");
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let mut size = 0;
    for i in 0..sizes.download_reps + 1 {
        let exported = host
            .rpc("runs.exportTranscript", json!({"runId": run}))
            .await;
        let id = exported["artifact"]["id"].as_str().unwrap().to_owned();
        let t = Instant::now();
        let mut file = tokio::fs::File::create(&target).await.unwrap();
        let info = host.client.download(&id, &mut file, TIMEOUT).await.unwrap();
        file.flush().await.unwrap();
        let d = t.elapsed();
        drop(file);
        host.rpc("artifacts.delete", json!({"id": id})).await;
        size = info.size;
        let mut cp = command("cp", &[]);
        cp.arg(&target).arg(&copy);
        let (d_cp, _) = timed_ok(cp).await;
        assert_eq!(std::fs::metadata(&copy).unwrap().len(), size);
        if i >= 1 {
            ours.push(d);
            base.push(d_cp);
        }
    }
    let mbps = |d: Duration| size as f64 / 1e6 / d.as_secs_f64();
    let base_rate = mbps(median(&base));
    // What the client's integrity check alone costs on the same bytes, in memory.
    let bytes = std::fs::read(&target).unwrap();
    let mut hashing = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        std::hint::black_box(Sha256::digest(&bytes));
        hashing.push(t.elapsed());
    }
    writeln!(
        out,
        "\n### Artifact download: `runs.exportTranscript` of a run with {:.1} MB of text (median of {})\n",
        size as f64 / 1e6,
        sizes.download_reps
    )
    .unwrap();
    out.push_str("| reader | MB/s | ratio to `cp` (goal ≥ 0.5×) |\n|---|---|---|\n");
    let r = mbps(median(&ours));
    writeln!(
        out,
        "| `Client::download` to a `tokio::fs::File` (GET, SHA-256 check, write) | {r:.0} | {:.2}× |",
        r / base_rate
    )
    .unwrap();
    writeln!(
        out,
        "| baseline: `cp` of the same file, whole process | {base_rate:.0} | 1.00× |"
    )
    .unwrap();
    let sha = mbps(median(&hashing));
    writeln!(
        out,
        "| for reference: SHA-256 of the same bytes in memory (the check every download does) | {sha:.0} | {:.2}× |",
        sha / base_rate
    )
    .unwrap();
    writeln!(
        out,
        "\nGoal ≥ 0.5× `cp`: {}.",
        verdict(r / base_rate, 0.5, true, "×")
    )
    .unwrap();
    out.push_str(
        "\nUpload: not measured here; the upload methods (`ocr.extractUpload`, `audio.transcribeUpload`) spend\n\
         their time in the OCR engine or the provider, and the spool's own write path is timed in the compute\n\
         bench's \"Media artifact write + read\".\n",
    );
}

/// A bench-only app bundle: tool `true` (no input) driven by the system `true`.
fn true_app(tmp: &Path) -> PathBuf {
    let app = tmp.join("true-app");
    let tool = app.join(".agentproto/tools/true");
    let driver = app.join(".agentproto/drivers/true-cli");
    std::fs::create_dir_all(&tool).unwrap();
    std::fs::create_dir_all(&driver).unwrap();
    std::fs::write(
        tool.join("TOOL.md"),
        "---\nschema: agentproto/tool/v1\nid: true\nname: True\ndescription: Does nothing, successfully.\nversion: 1.0.0\n\
         inputs:\n  type: object\n  additionalProperties: false\nmutates: false\nrisk_level: 0\nidempotent: true\n---\n# True\n",
    )
    .unwrap();
    std::fs::write(
        driver.join("DRIVER.md"),
        "---\nschema: agentproto/driver/v1\nid: true-cli\nname: true\ndescription: The system true.\nkind: cli\n\
         implements:\n  - tool: ./tools/true/TOOL.md\n    version: ^1\n    metadata:\n      cli:\n        argv: []\n        outputFormat: text\n\
         metadata:\n  cli:\n    bin: true\n---\n# true-cli\n",
    )
    .unwrap();
    app
}

async fn tool_calls(out: &mut String, sizes: &Sizes, tmp: &Path) {
    let app = true_app(tmp);
    let bundle = AppBundle::load(&app).unwrap();
    let ctx = CallContext::from_process_env();
    let true_bin = on_path("true").unwrap();
    let (mut lib, mut spawn, mut cli, mut bin, mut start, mut list) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let app_text = app.display().to_string();
    for i in 0..sizes.tool_calls + 3 {
        let t = Instant::now();
        let output = bundle.call("true", &json!({}), &ctx).await.unwrap();
        let d_lib = t.elapsed();
        assert_eq!(output.exit_code, 0);
        let (d_spawn, _) = timed_ok(command(&true_bin, &[])).await;
        let host = command(
            env!("CARGO_BIN_EXE_awp-host"),
            &["tools", "call", "true", "--input", "{}", "--app", &app_text],
        );
        let (d_cli, _) = timed_ok(host).await;
        let (d_bin, _) = timed_ok(command("/bin/true", &[])).await;
        let (d_start, _) = timed_ok(command(env!("CARGO_BIN_EXE_awp-host"), &["--version"])).await;
        let (d_list, _) = timed_ok(command(
            env!("CARGO_BIN_EXE_awp-host"),
            &["tools", "list", "--app", &app_text],
        ))
        .await;
        if i >= 3 {
            start.push(d_start);
            list.push(d_list);
            lib.push(d_lib);
            spawn.push(d_spawn);
            cli.push(d_cli);
            bin.push(d_bin);
        }
    }
    writeln!(
        out,
        "\n### Tool call of a `true` tool vs spawning `true` directly ({} calls each, interleaved)\n",
        sizes.tool_calls
    )
    .unwrap();
    out.push_str(
        "| path | median | p90 | ratio to its baseline (goal ≤ 1.5×) |\n|---|---|---|---|\n",
    );
    let row = |name: &str, v: &[Duration], base: &[Duration]| {
        format!(
            "| {name} | {} | {} | {:.2}× |\n",
            ms(median(v)),
            ms(quantile(v, 0.9)),
            median(v).as_secs_f64() / median(base).as_secs_f64()
        )
    };
    out.push_str(&row(
        "library: `AppBundle::call(\"true\", {})` (validate, expand, spawn, wait, drain)",
        &lib,
        &spawn,
    ));
    out.push_str(&row(
        "baseline: `agentwire_process::Command` spawn of `true`, drain, wait",
        &spawn,
        &spawn,
    ));
    out.push_str(&row(
        "whole process: `awp-host tools call true --input {}`",
        &cli,
        &bin,
    ));
    out.push_str(&row("baseline: `/bin/true` process", &bin, &bin));
    out.push_str(&row(
        "for reference: `awp-host --version` (process start and exit, no call)",
        &start,
        &bin,
    ));
    out.push_str(&row(
        "for reference: `awp-host tools list --app` (process start, `AppBundle::load`, no call)",
        &list,
        &bin,
    ));
    let ratio = |v: &[Duration], b: &[Duration]| median(v).as_secs_f64() / median(b).as_secs_f64();
    out.push_str(
        "\nThe `tools list` row separates starting `awp-host` and loading the app bundle (manifest parsing, input\n\
         schema compilation) from the call itself; the library row loads the bundle once, outside the timing.\n",
    );
    writeln!(
        out,
        "Goal ≤ 1.5×: library path {}; whole process {}.",
        verdict(ratio(&lib, &spawn), 1.5, false, "×"),
        verdict(ratio(&cli, &bin), 1.5, false, "×")
    )
    .unwrap();
}

/// A recording of `deltas` text deltas of `delta_bytes` each (letters only, so JSON adds no escapes).
fn recording(path: &Path, deltas: usize, delta_bytes: usize) {
    let mut text = String::from(
        "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"bench-1\",\"model\":\"m\"}\n",
    );
    text.push_str("{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n");
    let chunk: String = "abcdefghijklmnopqrstuvwxyz "
        .chars()
        .cycle()
        .take(delta_bytes)
        .collect();
    for _ in 0..deltas {
        writeln!(text, "{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{chunk}\"}}}}").unwrap();
    }
    text.push_str("{\"type\":\"content_block_stop\",\"index\":0}\n");
    text.push_str("{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"session_id\":\"bench-1\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n");
    std::fs::write(path, text).unwrap();
}

async fn control_plane(out: &mut String, sizes: &Sizes, tmp: &Path) {
    let fixture = agentwire_testkit::bin_path("awp-fixture");
    let small = tmp.join("small.jsonl");
    let big = tmp.join("big.jsonl");
    recording(&small, sizes.stream_deltas, 8);
    recording(&big, sizes.download_mib * 16, 64 * 1024);
    let agent = |name: &str, file: &Path| {
        format!(
            "[[agents]]\nname = \"{name}\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"replay\", \"--replay-file\", \"{}\"]\n",
            fixture.display(),
            file.display()
        )
    };
    let agents = format!("{}{}", agent("deltas", &small), agent("big", &big));
    let host = serve(tmp, &agents).await;
    let stream_run = host.finished_run("deltas").await;
    let big_run = host.finished_run("big").await;

    // The raw server answers with exactly what ours answered.
    let status = host.rpc("cli.status", json!({})).await;
    let mut records = Vec::new();
    subscribe(&host.client, &stream_run, &mut |r| records.push(r)).await;
    let canned = Arc::new(Canned {
        rpc_result: status,
        records,
        stream_result: json!({"runId": stream_run, "lastCursor": "bench:0"}),
    });
    let socket = tmp.join("raw.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let server = tokio::spawn(raw_server(listener, canned));
    let raw = Client::new(&socket, discover(&host.data).unwrap().token);

    status_process(out, &host, sizes).await;
    round_trips(out, &host, sizes, &raw).await;
    stream_rate(out, &host, sizes, &stream_run, &raw).await;
    download_rate(out, &host, sizes, &big_run, tmp).await;
    tool_calls(out, sizes, tmp).await;
    server.abort();
    host.stop().await;
}

fn main() {
    let smoke = agentwire_testkit::bench::smoke_mode();
    let sizes = Sizes::pick(smoke);
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut out = String::from(
        "## Local control plane and tool calls (`bins/awp-host/benches/control.rs`)\n\n\
         Against one `awp-host serve --console off` in a temp data dir, release build. Ratios are against the\n\
         baseline measured in the same run, interleaved with ours.\n",
    );
    rt.block_on(control_plane(&mut out, &sizes, tmp.path()));
    if smoke {
        print!("smoke run (no --bench), not written:\n{out}");
        return;
    }
    agentwire_testkit::bench::write_result("awp-host-control.md", &out).unwrap();
    print!("{out}");
}
