//! `run_turn` with a real ACP agent (`acp-fixture`): the store order and what dropping a turn does to the agent.

use std::path::Path;
use std::time::Duration;

use agentwire_awp::NormalizedEvent;
use agentwire_host::agents::{AgentRegistry, AgentSpec};
use agentwire_host::turn::{TurnOptions, TurnRequest, run_turn};
use agentwire_host::{RunStatus, Store};

fn acp_agent(dir: &Path, args: &[&str]) -> AgentSpec {
    let fixture = agentwire_testkit::bin_path("acp-fixture");
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        "[[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"{}\"\nargs = [{}]\n",
        fixture.display(),
        args.join(", ")
    );
    std::fs::write(dir.join("agents.toml"), text).expect("write agents.toml");
    let registry = AgentRegistry::load(dir, &|_| None, None).expect("load agents");
    registry.resolve(Some("acp")).expect("usable agent").clone()
}

fn request(prompt: &str) -> TurnRequest {
    TurnRequest {
        thread: None,
        model: None,
        prompt: prompt.to_owned(),
        attachments: Vec::new(),
        title: None,
    }
}

/// An agent spec that runs `acp-fixture args...` through a `/bin/sh` wrapper which first writes its pid to
/// `pid_file` and then `exec`s the fixture (same pid): a portable way to learn the agent's pid without `/proc`.
fn acp_agent_reporting_pid(dir: &Path, args: &[&str], pid_file: &Path) -> AgentSpec {
    let fixture = agentwire_testkit::bin_path("acp-fixture");
    let script = dir.join("agent.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho $$ > '{}'\nexec '{}' \"$@\"\n",
            pid_file.display(),
            fixture.display()
        ),
    )
    .expect("write agent.sh");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod agent.sh");
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        "[[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"{}\"\nargs = [{}]\n",
        script.display(),
        args.join(", ")
    );
    std::fs::write(dir.join("agents.toml"), text).expect("write agents.toml");
    let registry = AgentRegistry::load(dir, &|_| None, None).expect("load agents");
    registry.resolve(Some("acp")).expect("usable agent").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acp_turn_releases_the_agent_process() {
    let tmp = tempfile::tempdir().unwrap();
    let pid_file = tmp.path().join("agent.pid");
    let agent = acp_agent_reporting_pid(tmp.path(), &["--mode", "wait-cancel"], &pid_file);
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let mut waiting_tx = Some(waiting_tx);
    let mut observer = |event: &NormalizedEvent| {
        if let NormalizedEvent::TextDelta { text } = event
            && text.contains("waiting for cancel")
            && let Some(tx) = waiting_tx.take()
        {
            let _ = tx.send(());
        }
    };
    let options = TurnOptions::default();
    let agent_pid = {
        let mut turn = std::pin::pin!(run_turn(
            &mut store,
            &agent,
            request("please cancel"),
            &options,
            &mut observer,
            std::future::pending(),
        ));
        tokio::select! {
            _ = &mut turn => panic!("the turn waits for a cancel"),
            waited = waiting_rx => waited.expect("the agent started the turn"),
        }
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .expect("the wrapper wrote the agent's pid")
            .trim()
            .parse()
            .expect("pid");
        assert!(agentwire_testkit::proc::is_alive(pid), "the agent runs");
        pid
    };
    // The turn future is dropped: the agent's process group is killed. Wait for it (bounded, portable probe).
    assert!(
        agentwire_testkit::proc::wait_gone(agent_pid, Duration::from_secs(30)).await,
        "the agent process went away"
    );
    // The run was left `running` (the host died mid-turn, as far as the store knows).
    let threads = store.list_threads(10).unwrap();
    assert_eq!(threads.len(), 1);
    let detail = store.thread_detail(&threads[0].id).unwrap();
    assert_eq!(detail.runs[0].status, RunStatus::Running);
    assert_eq!(detail.thread.session_id.as_deref(), Some("sess-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agents_message_over_its_max_line_bytes_fails_the_turn_naming_the_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = agentwire_testkit::bin_path("acp-fixture");
    let text = format!(
        "[[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"huge-update\"]\nenv = {{ ACP_FIXTURE_HUGE_BYTES = \"200000\" }}\nmax_line_bytes = 100000\n",
        fixture.display()
    );
    std::fs::write(tmp.path().join("agents.toml"), text).unwrap();
    let registry = AgentRegistry::load(tmp.path(), &|_| None, None).unwrap();
    let agent = registry.resolve(Some("acp")).unwrap().clone();
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let report = run_turn(
        &mut store,
        &agent,
        request("dump"),
        &TurnOptions::default(),
        &mut |_| {},
        std::future::pending(),
    )
    .await
    .expect("turn recorded");
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error_code.as_deref(), Some("stdout_line_too_long"));
    let detail = report.error_detail.unwrap_or_default();
    assert!(detail.contains("max_line_bytes = 100000"), "{detail}");
}

fn in_thread(thread: &agentwire_host::ThreadId, prompt: &str) -> TurnRequest {
    let mut request = request(prompt);
    request.thread = Some(thread.clone());
    request
}

async fn turn(
    store: &mut Store,
    agent: &AgentSpec,
    request: TurnRequest,
) -> (agentwire_host::turn::TurnReport, Vec<NormalizedEvent>) {
    let mut events = Vec::new();
    let report = run_turn(
        store,
        agent,
        request,
        &TurnOptions::default(),
        &mut |event: &NormalizedEvent| events.push(event.clone()),
        std::future::pending(),
    )
    .await
    .expect("turn recorded");
    (report, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_thread_is_reopened_with_session_resume_when_advertised_else_session_load() {
    for (args, expect) in [
        (
            &["--mode", "echo"][..],
            "acp-fixture: session/resume sess-1",
        ),
        (
            &["--mode", "echo", "--no-resume"][..],
            "acp-fixture: session/load sess-1",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let agent = acp_agent(tmp.path(), args);
        let mut store = Store::open(&tmp.path().join("data")).unwrap();
        let (first, _) = turn(&mut store, &agent, request("hello")).await;
        assert_eq!(first.status, RunStatus::Succeeded);
        let (second, events) = turn(&mut store, &agent, in_thread(&first.thread_id, "again")).await;
        assert_eq!(second.status, RunStatus::Succeeded);
        assert!(
            second.stderr_tail.contains(expect),
            "{args:?}: {}",
            second.stderr_tail
        );
        // Nothing replayed is part of the turn, and no new session was started.
        assert_eq!(second.assistant_text, "again");
        assert!(
            !events.iter().any(|e| matches!(e, NormalizedEvent::Notice { kind, .. } if kind == "session_not_resumed")),
            "{events:?}"
        );
        assert_eq!(second.session_id.as_deref(), Some("sess-1"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_resume_falls_back_to_session_load() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = agentwire_testkit::bin_path("acp-fixture");
    let text = format!(
        "[[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"{}\"\nenv = {{ ACP_FIXTURE_RESUME_FAILS = \"1\" }}\n",
        fixture.display()
    );
    std::fs::write(tmp.path().join("agents.toml"), text).unwrap();
    let registry = AgentRegistry::load(tmp.path(), &|_| None, None).unwrap();
    let agent = registry.resolve(Some("acp")).unwrap().clone();
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let (first, _) = turn(&mut store, &agent, request("hello")).await;
    let (second, events) = turn(&mut store, &agent, in_thread(&first.thread_id, "again")).await;
    assert_eq!(second.status, RunStatus::Succeeded);
    assert!(
        second
            .stderr_tail
            .contains("acp-fixture: session/load sess-1"),
        "{}",
        second.stderr_tail
    );
    assert!(
        second
            .stderr_tail
            .contains("acp-fixture: session/resume sess-1 refused"),
        "resume is tried first: {}",
        second.stderr_tail
    );
    assert_eq!(second.session_id.as_deref(), Some("sess-1"));
    assert_eq!(second.assistant_text, "again");
    assert!(!events.iter().any(
        |e| matches!(e, NormalizedEvent::Notice { kind, .. } if kind == "session_not_resumed")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_that_replays_anyway_is_kept_out_of_the_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = acp_agent(tmp.path(), &["--mode", "resume-replays"]);
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let (first, _) = turn(&mut store, &agent, request("hello")).await;
    let (second, _) = turn(&mut store, &agent, in_thread(&first.thread_id, "again")).await;
    assert_eq!(second.status, RunStatus::Succeeded);
    assert_eq!(second.assistant_text, "again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_reaches_an_acp_agent_through_its_model_config_option() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = acp_agent(tmp.path(), &["--mode", "echo"]);
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let mut chosen = request("hi");
    chosen.model = Some("smart".to_owned());
    let (report, events) = turn(&mut store, &agent, chosen).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    let started = events.iter().find_map(|e| match e {
        NormalizedEvent::SessionStarted { model, .. } => Some(model.clone()),
        _ => None,
    });
    assert_eq!(started, Some(Some("smart".to_owned())));
    // The agent announces the change (before the prompt's answer, so within the turn): a notice, not text.
    assert!(events.iter().any(
        |e| matches!(e, NormalizedEvent::Notice { kind, .. } if kind == "config_option_update")
    ));
    assert_eq!(report.assistant_text, "hi");

    let mut unknown = request("hi");
    unknown.model = Some("huge".to_owned());
    let (report, _) = turn(&mut store, &agent, unknown).await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error_code.as_deref(), Some("agent_error"));
    assert!(
        report
            .error_detail
            .unwrap_or_default()
            .contains("unknown model"),
        "the agent's refusal is the detail"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_for_an_agent_without_a_model_option_is_noted_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = agentwire_testkit::bin_path("kandev-fixture");
    let text = format!(
        "[[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"{}\"\n",
        fixture.display()
    );
    std::fs::write(tmp.path().join("agents.toml"), text).unwrap();
    let registry = AgentRegistry::load(tmp.path(), &|_| None, None).unwrap();
    let agent = registry.resolve(Some("acp")).unwrap().clone();
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let mut chosen = request("hi");
    chosen.model = Some("smart".to_owned());
    let (report, events) = turn(&mut store, &agent, chosen).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    let notice = events.iter().find_map(|e| match e {
        NormalizedEvent::Notice { kind, detail } if kind == "model_not_applied" => detail.clone(),
        _ => None,
    });
    assert!(
        notice
            .unwrap_or_default()
            .contains("model smart was not applied")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_update_is_recorded_as_the_runs_usage() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = acp_agent(tmp.path(), &["--mode", "rich"]);
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    let (report, events) = turn(&mut store, &agent, request("count me")).await;
    assert_eq!(report.status, RunStatus::Succeeded);
    let usage = report.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (100, 0));
    assert_eq!(report.total_cost_usd, Some(0.01));
    let stored = store.run(&report.run_id).unwrap().expect("run");
    assert_eq!(stored.usage.map(|u| u.input_tokens), Some(100));
    let details: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            NormalizedEvent::Notice { kind, detail } => {
                Some(format!("{kind}: {}", detail.clone().unwrap_or_default()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        details,
        [
            "session_info_update: count me",
            "usage_update: used 100 of 200000 tokens, cost 0.01 USD"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_question_waits_until_the_tool_call_announced_before_it_was_observed() {
    use std::sync::{Arc, Mutex};
    // `tools` mode: the agent announces `tool_call` call-1, then asks permission for it. The question (here the
    // permission closure) must come after the observer (the renderer's `⚙` line) has seen that call: on the
    // terminal the question is the last thing printed, not followed by the tool line.
    let tmp = tempfile::tempdir().unwrap();
    let agent = acp_agent(tmp.path(), &["--mode", "tools"]);
    let mut store = Store::open(&tmp.path().join("data")).unwrap();
    for round in 0..5 {
        let observed: Arc<Mutex<Vec<String>>> = Arc::default();
        let at_question: Arc<Mutex<Option<Vec<String>>>> = Arc::default();
        let options = TurnOptions {
            acp_permissions: {
                let observed = observed.clone();
                let at_question = at_question.clone();
                agentwire_host::acp_turn::AcpPermissions::new(move |request| {
                    *at_question.lock().unwrap() = Some(observed.lock().unwrap().clone());
                    let outcome = agentwire_host::acp_turn::allow_outcome(&request.options)
                        .expect("an allow option");
                    Box::pin(async move { outcome })
                })
            },
            ..TurnOptions::default()
        };
        let seen = observed.clone();
        let report = run_turn(
            &mut store,
            &agent,
            request("write it"),
            &options,
            &mut |event: &NormalizedEvent| {
                if let NormalizedEvent::ToolUse { id, .. } = event {
                    seen.lock().unwrap().push(id.clone());
                }
            },
            std::future::pending(),
        )
        .await
        .expect("turn recorded");
        assert_eq!(report.status, RunStatus::Succeeded, "round {round}");
        let asked = at_question.lock().unwrap().clone();
        assert_eq!(
            asked.as_deref(),
            Some(&["call-1".to_owned()][..]),
            "round {round}: the question came before the observer saw the tool call"
        );
    }
}
