//! Custom bench (harness = false) of the managed-task API: tasks/s through `POST /v1/tasks` to completion with a
//! no-op tool (`/bin/true`), and the accept rate of the API alone, against direct spawns of `/bin/true`. Writes
//! `$AGENTWIRE_BENCH_OUT/tasks.md` (default `target/bench-results/`). `AGENTWIRE_BENCH_TASKS` sets the number of tasks (default 200).
//! Run without `--bench` (`cargo test --bench tasks`, as `cargo xtask ci` does) it is a smoke run: 5 tasks, every
//! check kept, nothing written.

#![allow(clippy::unwrap_used)] // A bench aborts on any setup failure; there is no caller to report to.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use agentwire_host::tasks::{
    AllowList, ApiConfig, ApiKey, TaskLimits, TaskServer, TaskService, TaskStore, WorkerConfig,
};
use agentwire_process::CancellationToken;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "bench-key-0123456789abcdef";

/// One exchange on a fresh connection; returns the response body.
async fn exchange(addr: SocketAddr, method: &str, path: &str, key: &str, body: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let extra = if method == "POST" {
        format!("Content-Type: application/json\r\nIdempotency-Key: {key}\r\n")
    } else {
        String::new()
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap()
}

fn id_of(body: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(body).unwrap();
    value["id"].as_str().unwrap().to_owned()
}

/// Runs `tasks` no-op tasks with `workers` workers: (submit wall time, submit-to-all-done wall time).
async fn run(dir: &Path, tasks: usize, workers: usize) -> (Duration, Duration) {
    let store = TaskStore::open(dir).unwrap();
    let service = TaskService::new(
        store,
        TaskLimits {
            max_pending_tasks: tasks as u64 + 1,
            ..TaskLimits::default()
        },
    );
    let server = TaskServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), false)
        .await
        .unwrap();
    let addr = server.local_addr();
    let shutdown = CancellationToken::new();
    let pool = service.start_workers(
        AllowList::new(["/bin/true"]).unwrap(),
        WorkerConfig {
            workers,
            ..WorkerConfig::default()
        },
        shutdown.clone(),
    );
    let token = shutdown.clone();
    let serving = tokio::spawn(server.serve(
        service,
        ApiKey::new(Some(KEY)).unwrap(),
        ApiConfig::default(),
        token,
    ));
    let started = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for n in 0..tasks {
        let body = exchange(
            addr,
            "POST",
            "/v1/tasks",
            &format!("k{n}"),
            r#"{"argv":["true"]}"#,
        )
        .await;
        ids.push(id_of(&body));
    }
    let submitted = started.elapsed();
    for id in &ids {
        loop {
            let body = exchange(addr, "GET", &format!("/v1/tasks/{id}"), "", "").await;
            if body.contains("\"status\":\"succeeded\"") {
                break;
            }
            assert!(!body.contains("\"status\":\"failed\""), "{body}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let completed = started.elapsed();
    shutdown.cancel();
    serving.await.unwrap();
    pool.join().await;
    (submitted, completed)
}

/// The baseline: `tasks` spawns of `/bin/true` one after another through `agentwire_process`, as a worker would
/// run them with nothing around it (no HTTP, no store, no queue).
async fn direct_spawns(tasks: usize) -> Duration {
    let started = Instant::now();
    for _ in 0..tasks {
        let mut cmd = agentwire_process::Command::new("/bin/true");
        let mut child = cmd.spawn().unwrap();
        child.stdin().close().await;
        if let Some(mut stdout) = child.take_stdout() {
            while stdout.next().await.is_some() {}
        }
        assert!(child.wait().await.success());
    }
    started.elapsed()
}

fn main() {
    // Smoke run (`cargo test --bench tasks`, as `cargo xtask ci` does): a few tasks through every path, no fragment.
    let smoke = agentwire_testkit::bench::smoke_mode();
    let tasks: usize = if smoke {
        5
    } else {
        std::env::var("AGENTWIRE_BENCH_TASKS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(200)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut out = String::from(
        "## Managed tasks (`crates/host/benches/tasks.rs`)\n\n\
         No-op tasks (`/bin/true`) submitted one by one over HTTP (a connection per request) to an in-process\n\
         `TaskServer`, store `synchronous=FULL`; \"completed\" is from the first submission until every task is\n\
         `succeeded` (the bench polls each task every 5 ms, which bounds the completion rate seen).\n\
         The baseline spawns `/bin/true` the same number of times, one after another, through `agentwire_process`.\n\n\
         | workers | tasks | accepted/s | completed/s | completed/s ratio to baseline |\n|---|---|---|---|---|\n",
    );
    let base = tasks as f64 / rt.block_on(direct_spawns(tasks)).as_secs_f64();
    for workers in [1, 2, 4] {
        let tmp = tempfile::tempdir().unwrap();
        let (submitted, completed) = rt.block_on(run(tmp.path(), tasks, workers));
        let rate = |d: Duration| tasks as f64 / d.as_secs_f64();
        writeln!(
            out,
            "| {workers} | {tasks} | {:.0} | {:.0} | {:.2}× |",
            rate(submitted),
            rate(completed),
            rate(completed) / base
        )
        .unwrap();
    }
    writeln!(
        out,
        "| baseline: direct spawns of `/bin/true` | {tasks} | – | {base:.0} | 1.00× |"
    )
    .unwrap();
    if smoke {
        print!("smoke run (no --bench), not written:\n{out}");
        return;
    }
    agentwire_testkit::bench::write_result("tasks.md", &out).unwrap();
    print!("{out}");
}
