//! Call round trip over an in-process pair: agentwire-jsonrpc's `Connection` against the same exchange done by hand.
//!
//! Each group makes one call at a time (`ping` with params, the peer answers with the params):
//! - `agentwire`: `Connection::memory` pair, the peer an `Incoming` loop answering with `respond`;
//! - `baseline_raw_lines`: a `tokio::io::duplex` pair; the request is built as a `serde_json::Value`, written as one
//!   line, read back with `read_line`, parsed into a `Value` by the peer, answered the same way and parsed by the
//!   caller. No id tracking, no validation, no tasks besides the peer: the floor of what a JSON-RPC call costs.
//!
//! Groups: `call_round_trip_small` (a 60-byte params object) and `call_round_trip_64kib` (a 64 KiB string param).
//! Run with `cargo bench -p agentwire-jsonrpc --bench call`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire_jsonrpc::{Config, Connection, IncomingMessage};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The agentwire side: a client connection whose peer echoes params.
fn agentwire_pair(rt: &tokio::runtime::Runtime) -> Connection {
    rt.block_on(async {
        let ((client, _client_in), (_server, mut server_in)) =
            Connection::memory(Config::default());
        tokio::spawn(async move {
            let _keep = _server;
            while let Some(message) = server_in.next().await {
                if let IncomingMessage::Request(mut request) = message {
                    let params = request.params.take().unwrap_or(Value::Null);
                    if request.respond(Ok(params)).await.is_err() {
                        return;
                    }
                }
            }
        });
        // `_client_in` is dropped: nothing but responses comes back in this bench.
        client
    })
}

/// The baseline: raw JSON lines over a duplex, by hand.
struct RawClient {
    reader: BufReader<ReadHalf<DuplexStream>>,
    writer: WriteHalf<DuplexStream>,
    next_id: u64,
    line: String,
}

impl RawClient {
    fn start(rt: &tokio::runtime::Runtime) -> RawClient {
        rt.block_on(async {
            let (a, b) = tokio::io::duplex(64 * 1024);
            let (a_read, a_write) = tokio::io::split(a);
            let (b_read, mut b_write) = tokio::io::split(b);
            tokio::spawn(async move {
                let mut reader = BufReader::new(b_read);
                let mut line = String::new();
                loop {
                    line.clear();
                    match reader.read_line(&mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let Ok(mut request) = serde_json::from_str::<Value>(&line) else { return };
                    let response = json!({"jsonrpc": "2.0", "id": request["id"].take(), "result": request["params"].take()});
                    let mut out = serde_json::to_vec(&response).expect("serialize");
                    out.push(b'\n');
                    if b_write.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
            RawClient { reader: BufReader::new(a_read), writer: a_write, next_id: 0, line: String::new() }
        })
    }

    async fn call(&mut self, params: &Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "ping", "params": params});
        let mut out = serde_json::to_vec(&request).expect("serialize");
        out.push(b'\n');
        self.writer.write_all(&out).await.expect("write");
        self.line.clear();
        self.reader.read_line(&mut self.line).await.expect("read");
        let mut response: Value = serde_json::from_str(&self.line).expect("parse");
        assert_eq!(response["id"], id);
        response["result"].take()
    }
}

fn bench_round_trip(c: &mut Criterion) {
    let rt = runtime();
    let small = json!({"sessionId": "c18953ea-5ff9-4cb7-9e09", "n": 1, "ok": true});
    let big = json!({"blob": "x".repeat(64 * 1024)});
    for (name, params) in [
        ("call_round_trip_small", small),
        ("call_round_trip_64kib", big),
    ] {
        let mut group = c.benchmark_group(name);
        group
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(20);

        let client = agentwire_pair(&rt);
        group.bench_function("agentwire", |b| {
            b.to_async(&rt).iter(|| async {
                let got = client
                    .call("ping", Some(params.clone()))
                    .await
                    .expect("call");
                std::hint::black_box(got);
            });
        });

        let raw = Arc::new(tokio::sync::Mutex::new(RawClient::start(&rt)));
        group.bench_function("baseline_raw_lines", |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let raw = raw.clone();
                let params = params.clone();
                async move {
                    let mut raw = raw.lock().await;
                    let start = Instant::now();
                    for _ in 0..iters {
                        // The clone mirrors the agentwire side, which takes params by value.
                        std::hint::black_box(raw.call(&params.clone()).await);
                    }
                    start.elapsed()
                }
            });
        });
        group.finish();
    }
}

criterion_group!(benches, bench_round_trip);
criterion_main!(benches);
