//! Detached runs as the local control plane starts them: `RunManager` with a real store and the real `awp-fixture`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentwire_host::agents::AgentRegistry;
use agentwire_host::detached::{
    CancelOutcome, DetachedRequest, RunEvents, RunManager, RunSignal, StartError,
};
use agentwire_host::turn::TurnOptions;
use agentwire_host::{RunId, RunStatus, Store};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(60);

fn registry(dir: &Path) -> Arc<AgentRegistry> {
    let fixture = agentwire_testkit::bin_path("awp-fixture");
    let mut text = String::new();
    for (name, mode) in [("fx", "normal"), ("silent", "silence")] {
        text.push_str(&format!(
            "[[agents]]\nname = \"{name}\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"{mode}\"]\n",
            fixture.display()
        ));
    }
    std::fs::write(dir.join("agents.toml"), text).expect("write agents.toml");
    Arc::new(AgentRegistry::load(dir, &|_| None, None).expect("load agents"))
}

fn manager(dir: &Path) -> (Arc<RunManager>, mpsc::UnboundedReceiver<(RunId, RunSignal)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let events: RunEvents = Arc::new(move |run: &RunId, signal: RunSignal| {
        let _ = tx.send((run.clone(), signal));
    });
    let manager = RunManager::new(
        dir.join("data"),
        registry(dir),
        TurnOptions::default(),
        events,
    );
    (Arc::new(manager), rx)
}

fn request(agent: &str, prompt: &str) -> DetachedRequest {
    DetachedRequest {
        agent: Some(agent.to_owned()),
        prompt: prompt.to_owned(),
        ..DetachedRequest::default()
    }
}

/// Waits for the `Ended` signal of `run`, collecting the events before it.
async fn ended(
    rx: &mut mpsc::UnboundedReceiver<(RunId, RunSignal)>,
    run: &RunId,
) -> (agentwire_host::turn::TurnReport, usize) {
    let mut events = 0;
    loop {
        let (id, signal) = tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("a signal in time")
            .expect("sender alive");
        if &id != run {
            continue;
        }
        match signal {
            RunSignal::Event(_) => events += 1,
            RunSignal::Ended(report) => return (*report, events),
            RunSignal::StoreFailed { code, message } => panic!("store failed: {code}: {message}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_is_durable_when_start_returns_and_records_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (manager, mut rx) = manager(tmp.path());
    let mut req = request("fx", "hello");
    req.title = Some("my title".to_owned());
    let started = manager.start(req).await.expect("started");
    // Durable at once: another connection sees the run and its user message.
    let store = Store::open(&tmp.path().join("data")).unwrap();
    let run = store.run(&started.run_id).unwrap().expect("run stored");
    assert_eq!(run.thread_id, started.thread_id);
    let thread = store.thread(&started.thread_id).unwrap().expect("thread");
    assert_eq!(thread.title, "my title");
    let (report, events) = ended(&mut rx, &started.run_id).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    assert_eq!(report.assistant_text, "echo: hello");
    assert!(
        events >= 2,
        "session start, text and completion were passed on"
    );
    assert!(!manager.is_live(&started.run_id));
    let run = store.run(&started.run_id).unwrap().expect("run stored");
    assert_eq!(run.status, RunStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_a_live_run_cancelled_and_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let (manager, mut rx) = manager(tmp.path());
    let started = manager
        .start(request("silent", "hello"))
        .await
        .expect("started");
    assert!(manager.is_live(&started.run_id));
    assert_eq!(manager.cancel(&started.run_id), CancelOutcome::Requested);
    assert_eq!(manager.cancel(&started.run_id), CancelOutcome::Requested);
    let (report, _) = ended(&mut rx, &started.run_id).await;
    assert_eq!(report.status, RunStatus::Cancelled);
    assert_eq!(manager.cancel(&started.run_id), CancelOutcome::NotLive);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_on_a_busy_thread_is_refused_thread_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let (manager, mut rx) = manager(tmp.path());
    let first = manager
        .start(request("silent", "one"))
        .await
        .expect("started");
    let mut second = request("silent", "two");
    second.thread = Some(first.thread_id.clone());
    let err = manager.start(second).await.expect_err("busy");
    assert_eq!(err.code(), "thread_busy", "{err}");
    manager.cancel(&first.run_id);
    ended(&mut rx, &first.run_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refuses_a_missing_project_dir_and_an_unknown_agent_without_recording() {
    let tmp = tempfile::tempdir().unwrap();
    let (manager, _rx) = manager(tmp.path());
    let mut req = request("fx", "hello");
    req.cwd = Some(tmp.path().join("does-not-exist"));
    let err = manager.start(req).await.expect_err("bad cwd");
    assert!(matches!(err, StartError::BadCwd { .. }), "{err}");
    let err = manager
        .start(request("nobody", "hello"))
        .await
        .expect_err("unknown agent");
    assert_eq!(err.code(), "agent_not_found", "{err}");
    let store = Store::open(&tmp.path().join("data")).unwrap();
    assert_eq!(store.count_threads().unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_live_runs_records_their_end_and_refuses_new_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let (manager, mut rx) = manager(tmp.path());
    let started = manager
        .start(request("silent", "hello"))
        .await
        .expect("started");
    let left = manager.shutdown(WAIT).await;
    assert!(
        left.is_empty(),
        "every run ended within the grace: {left:?}"
    );
    let (report, _) = ended(&mut rx, &started.run_id).await;
    assert_eq!(report.status, RunStatus::Cancelled);
    let err = manager
        .start(request("fx", "again"))
        .await
        .expect_err("shutting down");
    assert!(matches!(err, StartError::ShuttingDown), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_env_hook_reaches_the_agent_of_that_run_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let events: RunEvents = Arc::new(move |run: &RunId, signal: RunSignal| {
        let _ = tx.send((run.clone(), signal));
    });
    let manager = RunManager::new(
        tmp.path().join("data"),
        registry(tmp.path()),
        TurnOptions::default(),
        events,
    )
    .with_agent_env(Arc::new(|_thread, run| {
        vec![("FIXTURE_RUN_TOKEN".to_owned(), format!("token-for-{run}"))]
    }));
    let manager = Arc::new(manager);
    let started = manager
        .start(request("fx", "env:FIXTURE_RUN_TOKEN"))
        .await
        .expect("started");
    let (report, _) = ended(&mut rx, &started.run_id).await;
    assert_eq!(
        report.assistant_text,
        format!("echo: env:FIXTURE_RUN_TOKEN=token-for-{}", started.run_id)
    );
}
