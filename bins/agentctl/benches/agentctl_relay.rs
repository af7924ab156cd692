//! agentctl relay benchmarks (custom harness): `/acp/call` round-trip latency through agentctl vs the same request
//! straight over the fixture agent's stdio, and notifications/s delivered to 1 and 10 `/acp/stream` subscribers vs
//! reading the same flood straight from the agent's stdout.
//!
//! Run: `cargo build --release -p agentwire-fixture-agents && cargo bench -p agentctl --bench agentctl_relay`.
//! Writes `$AGENTWIRE_BENCH_OUT/agentctl_relay.md` (default `target/bench-results/`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use agentwire_process::{Command, StdoutItem};
use serde_json::json;
use support::{Agentctl, Options};

/// The sizes of one run: `cargo bench` measures; `cargo test --benches` (no `--bench` argument) only smoke-tests the
/// bench with tiny sizes and writes no report, as criterion does.
#[derive(Clone, Copy)]
struct Sizes {
    /// Round trips measured per side (after `warmup`).
    calls: usize,
    warmup: usize,
    /// Notifications per flood.
    flood: usize,
    /// Floods per measurement (the median is reported).
    flood_runs: usize,
}

const MEASURE: Sizes = Sizes {
    calls: 2_000,
    warmup: 200,
    flood: 200_000,
    flood_runs: 3,
};
const SMOKE: Sizes = Sizes {
    calls: 20,
    warmup: 2,
    flood: 1_000,
    flood_runs: 1,
};

const NOTE: &str = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}}"#;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Sequential `session/new` round trips straight over the fixture's stdio.
async fn direct_round_trips(sizes: Sizes) -> Vec<Duration> {
    let mut child = Command::new(agentwire_testkit::bin_path("acp-fixture"))
        .inherit_os_env()
        .stdout_jsonl(agentwire_jsonl::Limits::default())
        .spawn()
        .expect("spawn acp-fixture");
    let stdin = child.stdin();
    let mut stdout = child.take_stdout().expect("stdout");
    let mut samples = Vec::with_capacity(sizes.calls);
    for n in 0..sizes.warmup + sizes.calls {
        let line = json!({"jsonrpc": "2.0", "id": n, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}});
        let started = Instant::now();
        stdin
            .write_line(serde_json::to_string(&line).expect("json").as_bytes())
            .await
            .expect("write");
        let answer = loop {
            match stdout.next().await {
                Some(StdoutItem::Frame(agentwire_jsonl::Frame::Json(line))) => break line,
                Some(_) => {}
                None => panic!("acp-fixture ended"),
            }
        };
        if n >= sizes.warmup {
            samples.push(started.elapsed());
        }
        // The same answer the relayed side must see (checked outside the timing): this call's id, a session id.
        let answer: serde_json::Value = serde_json::from_slice(&answer).expect("json answer");
        assert_eq!(answer["id"], n, "{answer}");
        assert!(answer["result"]["sessionId"].is_string(), "{answer}");
    }
    samples
}

/// The same round trips through agentctl's `/api/v1/acp/call`, and `GET /health` round trips (the HTTP floor: what
/// any HTTP relay pays before it touches the agent).
async fn agentctl_round_trips(sizes: Sizes) -> (Vec<Duration>, Vec<Duration>) {
    let ctl = Agentctl::start(
        Options::agent(support::acp_fixture("echo")).env("AGENTCTL_LOG_LEVEL", "warn"),
    )
    .await;
    ctl.start_agent().await;
    let url = format!("{}/api/v1/acp/call", ctl.base);
    let body = serde_json::to_vec(
        &json!({"method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}),
    )
    .expect("json");
    let mut samples = Vec::with_capacity(sizes.calls);
    for n in 0..sizes.warmup + sizes.calls {
        let started = Instant::now();
        let response = ctl
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("call");
        assert_eq!(response.status(), 200);
        let answer = response.bytes().await.expect("body");
        if n >= sizes.warmup {
            samples.push(started.elapsed());
        }
        // The same answer as the direct side (checked outside the timing).
        let answer: serde_json::Value = serde_json::from_slice(&answer).expect("json answer");
        assert!(answer["result"]["sessionId"].is_string(), "{answer}");
    }
    let health = format!("{}/health", ctl.base);
    let mut floor = Vec::with_capacity(sizes.calls);
    for n in 0..sizes.warmup + sizes.calls {
        let started = Instant::now();
        let response = ctl.http.get(&health).send().await.expect("health");
        response.bytes().await.expect("body");
        if n >= sizes.warmup {
            floor.push(started.elapsed());
        }
    }
    (samples, floor)
}

/// Reads one flood of `flood` notifications straight from the agent's stdout; returns notifications/s.
async fn direct_flood(flood: usize) -> f64 {
    let script = format!("yes '{NOTE}' | head -n {flood}");
    let started = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .inherit_os_env()
        .stdout_jsonl(agentwire_jsonl::Limits::default())
        .spawn()
        .expect("spawn sh");
    let mut stdout = child.take_stdout().expect("stdout");
    let mut count = 0;
    while let Some(item) = stdout.next().await {
        if matches!(item, StdoutItem::Frame(agentwire_jsonl::Frame::Json(_))) {
            count += 1;
        }
    }
    assert_eq!(count, flood);
    flood as f64 / started.elapsed().as_secs_f64()
}

/// A shell agent that answers every request with a flood of `flood` notifications followed by the answer.
fn flood_agent(flood: usize) -> String {
    let script = format!(
        "i=0; while read -r line; do i=$((i+1)); yes '{NOTE}' | head -n {flood}; \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{{}}}}\\n' \"$i\"; done"
    );
    format!("sh -c {}", shlex::try_quote(&script).expect("quotable"))
}

/// One flood through agentctl: notifications/s per subscriber (over what each received) and how many subscribers
/// agentctl dropped for falling behind.
struct FloodOutcome {
    rates: Vec<f64>,
    dropped: usize,
}

/// Floods through agentctl, with its default limits (`AGENTCTL_SUBSCRIBER_QUEUE` 4096 messages), to `subscribers`
/// WebSocket subscribers. A subscriber that falls behind is dropped by agentctl, as in production: it is counted,
/// and its rate is taken over the messages it received.
async fn agentctl_flood(sizes: Sizes, subscribers: usize) -> FloodOutcome {
    let flood = sizes.flood;
    let options = Options::agent(flood_agent(flood)).env("AGENTCTL_LOG_LEVEL", "warn");
    let ctl = Agentctl::start(options).await;
    ctl.start_agent().await;
    let mut rates = Vec::new();
    let mut dropped = 0;
    for _ in 0..sizes.flood_runs {
        let mut readers = Vec::new();
        for _ in 0..subscribers {
            let mut ws = ctl.ws("/api/v1/acp/stream").await;
            readers.push(tokio::spawn(async move {
                use futures_util::StreamExt as _;
                let mut count = 0;
                while count < flood {
                    match ws.next().await {
                        Some(Ok(tokio_tungstenite::tungstenite::Message::Text(_))) => count += 1,
                        Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | None => {
                            // Dropped by agentctl for falling behind.
                            return (Instant::now(), ws, count);
                        }
                        Some(Ok(_)) => {}
                        Some(Err(error)) => panic!("stream failed after {count}: {error}"),
                    }
                }
                (Instant::now(), ws, count)
            }));
        }
        let started = Instant::now();
        let (status, _) = ctl.call("flood", json!({})).await;
        assert_eq!(status, 200);
        for reader in readers {
            let (done, ws, count) = reader.await.expect("reader");
            if count < flood {
                dropped += 1;
            }
            rates.push(count as f64 / (done - started).as_secs_f64());
            support::close(ws).await;
        }
    }
    FloodOutcome { rates, dropped }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let measure = !agentwire_testkit::bench::smoke_mode();
    let sizes = if measure { MEASURE } else { SMOKE };
    let (calls, flood) = (sizes.calls, sizes.flood);
    let report = runtime.block_on(async {
        let mut direct = direct_round_trips(sizes).await;
        let (mut relayed, mut floor) = agentctl_round_trips(sizes).await;
        floor.sort();
        direct.sort();
        relayed.sort();
        let (d50, d99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
        let (r50, r99) = (percentile(&relayed, 0.5), percentile(&relayed, 0.99));
        let mut direct_rates = Vec::new();
        for _ in 0..sizes.flood_runs {
            direct_rates.push(direct_flood(flood).await);
        }
        let direct_rate = median(direct_rates);
        let one = agentctl_flood(sizes, 1).await;
        let ten = agentctl_flood(sizes, 10).await;
        let (one_dropped, ten_dropped) = (one.dropped, ten.dropped);
        let (one, ten) = (median(one.rates), median(ten.rates));
        let mut out = String::new();
        out.push_str("## agentctl relay\n\n");
        out.push_str(&format!(
            "`/acp/call` round trip (`session/new` on `acp-fixture`, {calls} sequential calls) vs the same request over stdio; \
             flood of {flood} `session/update` notifications (~150 B) vs reading it straight from the agent's stdout. \
             agentctl runs with its default limits (`AGENTCTL_SUBSCRIBER_QUEUE` 4096 messages): a subscriber that falls \
             that far behind is dropped, as in production, and its rate is taken over what it received.\n\n"
        ));
        out.push_str("| measure | agentwire (agentctl) | baseline (direct stdio) | ratio |\n|---|---|---|---|\n");
        out.push_str(&format!(
            "| round trip p50 | {} | {} | {:.2}× |\n",
            micros(r50),
            micros(d50),
            r50.as_secs_f64() / d50.as_secs_f64()
        ));
        out.push_str(&format!(
            "| round trip p99 | {} | {} | {:.2}× |\n",
            micros(r99),
            micros(d99),
            r99.as_secs_f64() / d99.as_secs_f64()
        ));
        out.push_str(&format!(
            "| HTTP floor: `GET /health` p50 (no agent involved) | {} | – | – |\n",
            micros(percentile(&floor, 0.5))
        ));
        out.push_str(&format!(
            "| notifications/s, 1 subscriber | {one:.0} | {direct_rate:.0} | {:.2}× |\n",
            direct_rate / one
        ));
        out.push_str(&format!(
            "| notifications/s per subscriber, 10 subscribers | {ten:.0} | {direct_rate:.0} | {:.2}× |\n",
            direct_rate / ten
        ));
        out.push_str(&format!(
            "| subscribers dropped for falling behind (of 1 × {runs} / 10 × {runs}) | {one_dropped} / {ten_dropped} | – | – |\n",
            runs = sizes.flood_runs
        ));
        out.push_str("\nRatios are agentctl's cost relative to the baseline (time, or baseline rate / agentctl rate): lower is better; goals ≤ 2× round trip, ≥ 50 000 notifications/s to one subscriber.\n");
        let floor50 = percentile(&floor, 0.5);
        out.push_str(&format!(
            "\nRound trip goal (≤ 2× p50): {} this run. agentctl adds {} to the direct round trip's p50, of which {} is the \
             HTTP floor; the rest is the relay's own hops (agentwire-process's stdout task → agentctl's reader task → the \
             call's waiter in the HTTP handler; the request line is written to the agent's stdin by the handler itself). \
             The ratio depends on the fixture's own speed: `acp-fixture` answers over agentwire-jsonrpc, so a faster \
             agent makes the same absolute relay cost a larger ratio.\n",
            if r50.as_secs_f64() <= 2.0 * d50.as_secs_f64() { "met" } else { "missed" },
            micros(r50.saturating_sub(d50)),
            micros(floor50),
        ));
        out
    });
    println!("{report}");
    if !measure {
        println!("smoke run (no --bench argument): no report written");
        return;
    }
    let path = agentwire_testkit::bench::write_result("agentctl_relay.md", &report)
        .expect("write bench report");
    println!("written to {}", path.display());
}
