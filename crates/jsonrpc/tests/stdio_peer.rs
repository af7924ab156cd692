//! `Connection::stdio()` in a second process: this test binary spawns itself with `--peer` (through
//! agentwire-process) and talks JSON-RPC with it over real OS pipes, both directions.
//!
//! It runs without libtest (`harness = false`) because the peer's stdout must carry protocol lines only.
//! Each case prints `ok`/`FAILED`; the binary ends with the plain `N passed, N failed` line and a non-zero exit on
//! failure.

use std::process::ExitCode;
use std::time::Duration;

use agentwire_jsonrpc::{CallError, Connection, Incoming, IncomingMessage};
use agentwire_process::StopPlan;
use agentwire_testkit::jsonrpc_peer;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start tokio: {error}");
            return ExitCode::FAILURE;
        }
    };
    if std::env::args().any(|arg| arg == jsonrpc_peer::PEER_FLAG) {
        runtime.block_on(jsonrpc_peer::run_stdio_peer());
        return ExitCode::SUCCESS;
    }
    let cases: [(&str, Case); 4] = [
        ("round_trip_through_a_stdio_peer", |c, i| {
            Box::pin(round_trip(c, i))
        }),
        ("the_peer_calls_back_while_answering", |c, i| {
            Box::pin(call_back(c, i))
        }),
        ("a_notification_storm_arrives_in_order", |c, i| {
            Box::pin(storm(c, i))
        }),
        ("ten_megabyte_params_both_ways", |c, i| Box::pin(huge(c, i))),
    ];
    let (mut passed, mut failed) = (0, 0);
    for (name, case) in cases {
        let outcome = runtime.block_on(run_case(case));
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok");
            }
            Err(error) => {
                failed += 1;
                println!("test {name} ... FAILED: {error}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

type CaseFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>>>>;
type Case = fn(Connection, Incoming) -> CaseFuture;

/// Spawns the peer, runs `case`, then closes the peer's stdin and checks that it exits 0 on that EOF.
async fn run_case(case: Case) -> Result<(), String> {
    let (child, connection, incoming) = jsonrpc_peer::spawn_self_peer()?;
    let result = tokio::time::timeout(WAIT, case(connection, incoming))
        .await
        .map_err(|_| "timed out".to_owned());
    child.stdin().close().await;
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .map_err(|_| "peer did not exit on EOF".to_owned());
    if status.is_err() {
        child.stop(StopPlan::default()).await;
    }
    result??;
    let status = status?;
    if status.code != Some(0) {
        return Err(format!("peer exited with {status}"));
    }
    Ok(())
}

fn expect_eq(got: &Value, want: &Value) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("got {got}, want {want}"))
    }
}

async fn call(connection: &Connection, method: &str, params: Value) -> Result<Value, String> {
    connection
        .call(method, Some(params))
        .await
        .map_err(|e: CallError| format!("{method}: {e}"))
}

async fn round_trip(connection: Connection, _incoming: Incoming) -> Result<(), String> {
    let got = call(&connection, "echo", json!({"hello": "peer"})).await?;
    expect_eq(&got, &json!({"hello": "peer"}))?;
    let stats = connection.stats();
    if stats.invalid_lines + stats.invalid_messages != 0 {
        return Err(format!(
            "the peer wrote something that is not JSON-RPC: {stats:?}"
        ));
    }
    Ok(())
}

async fn call_back(connection: Connection, mut incoming: Incoming) -> Result<(), String> {
    let answer = tokio::spawn(async move {
        match incoming.next().await {
            Some(IncomingMessage::Request(request)) if request.method == "client/method" => {
                let params = request.params.clone().unwrap_or(Value::Null);
                request
                    .respond(Ok(json!({"client saw": params})))
                    .await
                    .map_err(|e| e.to_string())
            }
            other => Err(format!("expected client/method, got {other:?}")),
        }
    });
    let got = call(&connection, "callback", json!({"x": 1})).await?;
    answer.await.map_err(|e| e.to_string())??;
    expect_eq(&got, &json!({"client said": {"client saw": {"x": 1}}}))
}

async fn storm(connection: Connection, mut incoming: Incoming) -> Result<(), String> {
    const COUNT: u64 = 2_000;
    let drain = tokio::spawn(async move {
        for expect in 0..COUNT {
            match incoming.next().await {
                Some(IncomingMessage::Notification(n))
                    if n.params == Some(json!({"seq": expect})) => {}
                other => return Err(format!("expected storm seq {expect}, got {other:?}")),
            }
        }
        Ok(())
    });
    let got = call(&connection, "storm", json!({"count": COUNT})).await?;
    drain.await.map_err(|e| e.to_string())??;
    expect_eq(&got, &json!("done"))
}

async fn huge(connection: Connection, _incoming: Incoming) -> Result<(), String> {
    let blob = "z".repeat(10 * 1024 * 1024);
    let got = call(&connection, "echo", json!({"blob": blob})).await?;
    if got["blob"].as_str() != Some(blob.as_str()) {
        return Err("10 MB blob did not come back intact".to_owned());
    }
    Ok(())
}
