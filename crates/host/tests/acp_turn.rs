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

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(marker)
                .then(|| entry.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acp_turn_releases_the_agent_process() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("--marker-{}", std::process::id());
    let agent = acp_agent(tmp.path(), &["--mode", "wait-cancel", &marker]);
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
    {
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
        assert_eq!(processes_with(&marker).len(), 1, "the agent runs");
    }
    // The turn future is dropped: the agent's process group is killed. Wait for it (bounded), polling /proc.
    let gone = async {
        while !processes_with(&marker).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .expect("the agent process went away");
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
