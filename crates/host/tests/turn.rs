//! The turn runner as an embedder uses it: `run_turn` with a real store file and the real `awp-fixture` agent.

use std::path::Path;

use agentwire_awp::NormalizedEvent;
use agentwire_host::agents::{AgentRegistry, AgentSpec};
use agentwire_host::turn::{TurnOptions, TurnReport, TurnRequest, run_turn};
use agentwire_host::{RunStatus, Store, ThreadId};

fn agent(dir: &Path, name: &str, protocol: &str, mode: &str) -> AgentSpec {
    let fixture = agentwire_testkit::bin_path("awp-fixture");
    let text = format!(
        "[[agents]]\nname = \"{name}\"\nprotocol = \"{protocol}\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"{mode}\"]\n",
        fixture.display()
    );
    std::fs::write(dir.join("agents.toml"), text).expect("write agents.toml");
    let registry = AgentRegistry::load(dir, &|_| None, None).expect("load agents");
    registry.resolve(Some(name)).expect("usable agent").clone()
}

fn request(thread: Option<ThreadId>, prompt: &str) -> TurnRequest {
    TurnRequest {
        thread,
        model: None,
        prompt: prompt.to_owned(),
        attachments: Vec::new(),
        title: None,
    }
}

async fn turn(
    store: &mut Store,
    agent: &AgentSpec,
    req: TurnRequest,
) -> (TurnReport, Vec<NormalizedEvent>) {
    let mut events = Vec::new();
    let report = run_turn(
        store,
        agent,
        req,
        &TurnOptions::default(),
        &mut |e| events.push(e.clone()),
        std::future::pending(),
    )
    .await
    .expect("turn recorded");
    (report, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_recorded_and_the_next_one_resumes_its_session() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = agent(tmp.path(), "fx", "awp-jsonl", "normal");
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let (first, events) = turn(&mut store, &fx, request(None, "hello")).await;
    assert_eq!(first.status, RunStatus::Succeeded);
    assert_eq!(first.assistant_text, "echo: hello");
    assert!(matches!(
        events.first(),
        Some(NormalizedEvent::SessionStarted { .. })
    ));
    assert!(matches!(
        events.last(),
        Some(NormalizedEvent::TurnCompleted(_))
    ));
    let (second, _) = turn(
        &mut store,
        &fx,
        request(Some(first.thread_id.clone()), "again"),
    )
    .await;
    assert_eq!(second.thread_id, first.thread_id);
    assert_eq!(second.session_id, first.session_id);
    let detail = store.thread_detail(&first.thread_id).unwrap();
    assert_eq!(detail.runs.len(), 2);
    assert_eq!(detail.runs[1].resumed_session_id, first.session_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancel_future_cancels_the_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let quiet = agent(tmp.path(), "quiet", "awp-jsonl", "silence");
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut tx = Some(tx);
    let mut observer = |e: &NormalizedEvent| {
        if matches!(e, NormalizedEvent::TextDelta { .. })
            && let Some(tx) = tx.take()
        {
            tx.send(()).expect("runner still waiting");
        }
    };
    let cancel = async {
        rx.await.expect("observer saw text");
    };
    let report = run_turn(
        &mut store,
        &quiet,
        request(None, "x"),
        &TurnOptions::default(),
        &mut observer,
        cancel,
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunStatus::Cancelled);
    assert_eq!(report.error_code.as_deref(), Some("cancelled"));
    let run = store.run(&report.run_id).unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
}

/// An agent entry with `max_line_bytes` whose every turn first prints one line of exactly `line_bytes` bytes.
fn long_line_agent(dir: &Path, max_line_bytes: usize, line_bytes: usize) -> AgentSpec {
    let fixture = agentwire_testkit::bin_path("awp-fixture");
    let text = format!(
        "[[agents]]\nname = \"long\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"long-line\", \"--line-bytes\", \"{line_bytes}\"]\nmax_line_bytes = {max_line_bytes}\n",
        fixture.display()
    );
    std::fs::write(dir.join("agents.toml"), text).expect("write agents.toml");
    let registry = AgentRegistry::load(dir, &|_| None, None).expect("load agents");
    registry
        .resolve(Some("long"))
        .expect("usable agent")
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_max_line_bytes_accepts_a_line_at_the_limit_and_fails_one_byte_over_naming_the_setting()
 {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let at = long_line_agent(tmp.path(), 64 * 1024, 64 * 1024);
    let (report, _) = turn(&mut store, &at, request(None, "hi")).await;
    assert_eq!(report.status, RunStatus::Succeeded, "{report:?}");

    let over = long_line_agent(tmp.path(), 64 * 1024, 64 * 1024 + 1);
    let (report, _) = turn(&mut store, &over, request(None, "hi")).await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error_code.as_deref(), Some("stdout_line_too_long"));
    let detail = report.error_detail.unwrap_or_default();
    assert!(
        detail.contains("max_line_bytes = 65536") && detail.contains("`long`"),
        "{detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_message_is_committed_before_the_agent_is_started() {
    use agentwire_host::turn::RunRecordedHook;
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let fx = agent(tmp.path(), "fx", "awp-jsonl", "normal");
    let data = tmp.path().join("data");
    let mut store = Store::open(&data).unwrap();
    // The hook runs after the begin commit and before the spawn; a second connection sees only committed rows.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (hook_data, hook_seen) = (data.clone(), seen.clone());
    let options = TurnOptions {
        on_run_recorded: Some(RunRecordedHook(Arc::new(move |thread, _run| {
            let other = Store::open(&hook_data).unwrap();
            let detail = other.thread_detail(thread).unwrap();
            hook_seen
                .lock()
                .unwrap()
                .extend(detail.messages.into_iter().map(|m| m.content));
            Box::pin(async { Vec::new() })
        }))),
        ..TurnOptions::default()
    };
    let report = run_turn(
        &mut store,
        &fx,
        request(None, "durable first"),
        &options,
        &mut |_| {},
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunStatus::Succeeded);
    assert_eq!(*seen.lock().unwrap(), vec!["durable first".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_id_is_committed_before_the_observer_sees_it() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = agent(tmp.path(), "fx", "awp-jsonl", "normal");
    let data = tmp.path().join("data");
    let mut store = Store::open(&data).unwrap();
    let other = Store::open(&data).unwrap();
    // What a second connection (committed rows only) holds when each event reaches the observer.
    let mut checked = Vec::new();
    let report = run_turn(
        &mut store,
        &fx,
        request(None, "hello"),
        &TurnOptions::default(),
        &mut |event| {
            let thread = &other.list_threads(1).unwrap()[0];
            match event {
                NormalizedEvent::SessionStarted { session_id, .. } => {
                    assert_eq!(thread.session_id.as_deref(), Some(session_id.as_str()));
                    checked.push("session");
                }
                // The user message is durable by then too (committed before the spawn).
                NormalizedEvent::TurnCompleted(_) => {
                    let detail = other.thread_detail(&thread.id).unwrap();
                    assert_eq!(detail.messages[0].content, "hello");
                    checked.push("end");
                }
                _ => {}
            }
        },
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunStatus::Succeeded);
    assert_eq!(checked, vec!["session", "end"]);
}

/// An agent (a `/bin/sh` script) that, on reading the turn's line, copies the store's database and WAL files to `snap`,
/// then answers one trivial AWP turn.
fn snapshotting_agent(dir: &Path, data: &Path, snap: &Path) -> AgentSpec {
    let db = data.join(agentwire_host::store::DATABASE_FILE);
    let script = format!(
        r#"#!/bin/sh
read -r line
cp '{db}' '{snap}/db.sqlite3'
cp '{db}-wal' '{snap}/db.sqlite3-wal'
echo '{{"type":"system","subtype":"init","session_id":"snap-1","model":"m","cwd":"/","tools":[]}}'
echo '{{"type":"result","subtype":"success","is_error":false,"session_id":"snap-1","result":"ok"}}'
read -r line
"#,
        db = db.display(),
        snap = snap.display()
    );
    let script_path = dir.join("snapshot-agent.sh");
    std::fs::write(&script_path, script).expect("write the agent script");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script_path, std::fs::Permissions::from_mode(0o755))
            .expect("make the agent script executable");
    }
    let text = format!(
        "[[agents]]\nname = \"snap\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\n",
        script_path.display()
    );
    std::fs::write(dir.join("agents.toml"), text).expect("write agents.toml");
    let registry = AgentRegistry::load(dir, &|_| None, None).expect("load agents");
    registry
        .resolve(Some("snap"))
        .expect("usable agent")
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_message_is_committed_when_the_agent_reads_the_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let snap = tmp.path().join("snap");
    std::fs::create_dir_all(&snap).unwrap();
    let mut store = Store::open(&data).unwrap();
    let agent = snapshotting_agent(tmp.path(), &data, &snap);
    // No run-recorded hook: the begin commit overlaps the agent's startup and must still precede the stdin write.
    let (report, _) = turn(&mut store, &agent, request(None, "snapshot me")).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    assert_eq!(report.session_id.as_deref(), Some("snap-1"));
    // Opening the copy replays only committed WAL frames: what it holds was durable when the agent read the turn.
    let copy = rusqlite::Connection::open(snap.join("db.sqlite3")).unwrap();
    let (user, status): (String, String) = copy
        .query_row(
            "SELECT m.content, r.status FROM messages m JOIN runs r ON r.id = m.run_id WHERE m.role = 'user'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(user, "snapshot me");
    assert_eq!(status, "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_agent_serves_several_turns_on_one_process_and_restarts_after_a_cancel() {
    use agentwire_host::turn::{LiveAgent, run_turn_live};
    let tmp = tempfile::tempdir().unwrap();
    let fx = agent(tmp.path(), "fx", "awp-jsonl", "normal");
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let mut live = LiveAgent::new();
    let options = TurnOptions::default();
    let mut thread = None;
    let mut texts = Vec::new();
    for prompt in ["pid", "pid"] {
        let report = run_turn_live(
            &mut store,
            &fx,
            request(thread.clone(), prompt),
            &options,
            &mut |_| {},
            std::future::pending(),
            &mut live,
        )
        .await
        .expect("turn recorded");
        assert_eq!(report.status, RunStatus::Succeeded, "{report:?}");
        thread = Some(report.thread_id.clone());
        texts.push(report.assistant_text);
    }
    let pid = live.pid().expect("a kept process");
    assert_eq!(
        texts,
        [
            format!("echo: pid={pid} turn=1"),
            format!("echo: pid={pid} turn=2")
        ]
    );
    assert_eq!((live.spawned(), live.restarts()), (1, 0));

    // A cancelled turn stops the process; the next turn starts one that resumes the session.
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let mut started_tx = Some(started_tx);
    let cancel = async move {
        // Cancel once the agent has begun to answer.
        if started_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let report = run_turn_live(
        &mut store,
        &fx,
        request(thread.clone(), "hang"),
        &options,
        &mut |e| {
            if matches!(e, NormalizedEvent::TextDelta { .. })
                && let Some(tx) = started_tx.take()
            {
                let _ = tx.send(());
            }
        },
        cancel,
        &mut live,
    )
    .await
    .expect("turn recorded");
    assert_eq!(report.status, RunStatus::Cancelled);
    assert!(!live.is_alive());
    let report = run_turn_live(
        &mut store,
        &fx,
        request(thread.clone(), "pid"),
        &options,
        &mut |_| {},
        std::future::pending(),
        &mut live,
    )
    .await
    .expect("turn recorded");
    assert_eq!(report.status, RunStatus::Succeeded);
    assert!(report.assistant_text.ends_with("turn=1"), "{report:?}");
    assert_ne!(live.pid(), Some(pid));
    assert_eq!((live.spawned(), live.restarts()), (2, 1));
    let detail = store.thread_detail(thread.as_ref().unwrap()).unwrap();
    let resumed: Vec<_> = detail
        .runs
        .iter()
        .map(|r| r.resumed_session_id.is_some())
        .collect();
    assert_eq!(resumed, [false, false, false, true]);

    // A turn another host ran on the thread meanwhile: the kept process has not seen it, so a new one resumes.
    let (other, _) = turn(&mut store, &fx, request(thread.clone(), "elsewhere")).await;
    assert_eq!(other.status, RunStatus::Succeeded);
    let report = run_turn_live(
        &mut store,
        &fx,
        request(thread.clone(), "pid"),
        &options,
        &mut |_| {},
        std::future::pending(),
        &mut live,
    )
    .await
    .expect("turn recorded");
    assert!(report.assistant_text.ends_with("turn=1"), "{report:?}");
    assert_eq!((live.spawned(), live.restarts()), (3, 2));
    live.stop().await;
    assert!(live.pid().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_refused_at_turn_time_is_phrased_in_agents_toml_terms() {
    let tmp = tempfile::tempdir().unwrap();
    let mut fx = agent(tmp.path(), "fx", "awp-jsonl", "normal");
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    // The launch is validated again at each turn: an argument added since the load (as `--agent-arg` does)
    // breaks the remote-URL rule, and the hint is the agents.toml switch, not the environment variable.
    fx.launch
        .prefix_args
        .push("https://api.example.com".to_owned());
    let err = run_turn(
        &mut store,
        &fx,
        request(None, "hi"),
        &TurnOptions::default(),
        &mut |_| {},
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "remote_url_not_allowed");
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(
        chain.contains("args argument 2")
            && chain.contains("remote_api_opt_in = true on the agent in agents.toml"),
        "{chain}"
    );
    assert!(!chain.contains("AWP_AGENT"), "{chain}");
}
