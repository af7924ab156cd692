//! `awp-host chat` without a prompt on a terminal: the interactive session, driven through a real pty (tmux,
//! on its own socket in the test's temp dir). Every wait is a bounded poll of the pane's content.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentwire_process::{Command, StdoutItem};
use support::Host;

/// Longest wait for one expected piece of pane content.
const PANE_TIMEOUT: Duration = Duration::from_secs(60);

/// One tmux server on a socket of its own, killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    async fn cmd(&self, args: &[&str]) -> (i32, String) {
        let mut cmd = Command::new("tmux");
        cmd.arg("-S").arg(&self.socket).args(args).inherit_os_env();
        let mut child = cmd.spawn().expect("spawn tmux");
        child.stdin().close().await;
        let mut stdout = child.take_stdout().expect("stdout");
        let mut bytes = Vec::new();
        while let Some(item) = stdout.next().await {
            if let StdoutItem::Bytes(b) = item {
                bytes.extend_from_slice(&b);
            }
        }
        let status = child.wait().await;
        (
            status.code_or_signal(),
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    }

    /// Starts `awp-host ARGS` in a detached 200x50 session; the pane then shows `EXITED=<code>`.
    async fn start(host: &Host, args: &[&str]) -> Tmux {
        let tmux = Tmux {
            socket: host.path("tmux.sock"),
        };
        let bin = agentwire_testkit::bin_path("awp-host");
        let mut line = format!(
            "{} --data-dir {} --config-dir {}",
            quote(&bin),
            quote(&host.data),
            quote(&host.config)
        );
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        // The pane stays open after the exit so that its code can be read.
        line.push_str("; echo EXITED=$?; exec cat");
        let (code, out) = tmux
            .cmd(&[
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "200",
                "-y",
                "50",
                &line,
            ])
            .await;
        assert_eq!(code, 0, "tmux new-session: {out}");
        tmux
    }

    async fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        let (code, out) = self.cmd(&args).await;
        assert_eq!(code, 0, "tmux send-keys: {out}");
    }

    /// Types `text` and Enter.
    async fn line(&self, text: &str) {
        self.send(&["-l", text]).await;
        self.send(&["Enter"]).await;
    }

    async fn pane(&self) -> String {
        let (_, out) = self
            .cmd(&["capture-pane", "-p", "-J", "-S", "-", "-t", "t"])
            .await;
        out
    }

    /// Polls the pane until `done` holds for its content (bounded by [`PANE_TIMEOUT`]); returns the content.
    async fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let pane = self.pane().await;
            if done(&pane) {
                return pane;
            }
            assert!(
                start.elapsed() < PANE_TIMEOUT,
                "timed out waiting for {what}; the pane shows:\n{pane}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_count(&self, needle: &str, n: usize) -> String {
        self.wait_for(&format!("{n} × {needle:?}"), |p| {
            p.matches(needle).count() >= n
        })
        .await
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // Best effort: the server goes when its last session does; kill it so no `cat` is left behind.
        let socket = self.socket.clone();
        let kill = async move {
            let mut cmd = Command::new("tmux");
            cmd.arg("-S")
                .arg(&socket)
                .arg("kill-server")
                .inherit_os_env();
            if let Ok(child) = cmd.spawn() {
                child.stdin().close().await;
                child.wait().await;
            }
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            tokio::task::block_in_place(|| handle.block_on(kill));
        }
    }
}

fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// `pid=<pid> turn=<n>` lines of the fixture, in order.
fn pid_turns(pane: &str) -> Vec<(String, String)> {
    pane.lines()
        .filter_map(|l| {
            let rest = &l[l.find("echo: pid=")? + "echo: pid=".len()..];
            let (pid, turn) = rest.split_once(" turn=")?;
            Some((pid.to_owned(), turn.trim().to_owned()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agent_process_serves_every_turn_of_an_interactive_session() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let tmux = Tmux::start(&host, &["chat", "--agent", "fx"]).await;
    tmux.wait_count("interactive session", 1).await;
    tmux.line("pid").await;
    tmux.wait_count("turn=1", 1).await;
    tmux.line("pid").await;
    let pane = tmux.wait_count("turn=2", 1).await;
    let turns = pid_turns(&pane);
    assert_eq!(turns.len(), 2, "{pane}");
    assert_eq!(turns[0].0, turns[1].0, "one process served both turns");
    assert_eq!((turns[0].1.as_str(), turns[1].1.as_str()), ("1", "2"));
    tmux.line("/thread").await;
    let pane = tmux.wait_count("last run run_", 1).await;
    let thread = pane
        .lines()
        .find_map(|l| l.strip_prefix("thread "))
        .and_then(|l| l.split_whitespace().next())
        .expect("a thread id")
        .to_owned();
    tmux.line("/bogus").await;
    tmux.wait_count("unknown command /bogus", 1).await;
    // Ctrl-D ends the session (and the agent).
    tmux.send(&["C-d"]).await;
    tmux.wait_count("EXITED=0", 1).await;

    // Both turns were recorded in one thread like `chat` turns; the process was not resumed between them.
    let detail = host.thread(&thread).await;
    let runs = detail["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{detail}");
    assert!(runs.iter().all(|r| r["status"] == "succeeded"), "{detail}");
    assert!(
        runs.iter().all(|r| r["resumed_session_id"].is_null()),
        "{detail}"
    );
    let messages = detail["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4, "{detail}");
    assert_eq!(messages[0]["content"], "pid");
    // The line history is kept in the data directory.
    let history = std::fs::read_to_string(host.data.join("history")).expect("history file");
    assert!(
        history.contains("pid") && history.contains("/thread"),
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_running_turn_and_the_next_turn_resumes_in_a_new_process() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let tmux = Tmux::start(&host, &["chat", "--agent", "fx"]).await;
    tmux.wait_count("interactive session", 1).await;
    tmux.line("pid").await;
    tmux.wait_count("turn=1", 1).await;
    tmux.line("hang").await;
    tmux.wait_count("waiting for ever", 1).await;
    tmux.send(&["C-c"]).await;
    tmux.wait_count("cancelled (cancelled)", 1).await;
    // The prompt is back: the next line is a turn on a new process that resumed the session.
    tmux.line("pid").await;
    tmux.wait_count("turn=1", 2).await;
    // Said once the turn has ended (after its output), so wait for it rather than reading the pane at `turn=1`.
    let pane = tmux
        .wait_count("a new agent process resumed the thread's session", 1)
        .await;
    let turns = pid_turns(&pane);
    assert_eq!(turns.len(), 2, "{pane}");
    assert_ne!(turns[0].0, turns[1].0, "the cancelled process was replaced");
    // `/new` starts a new thread with a new process.
    tmux.line("/new").await;
    tmux.wait_count("starts a new thread", 1).await;
    tmux.line("/exit").await;
    tmux.wait_count("EXITED=0", 1).await;

    let out = host.run(&["threads", "list", "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let threads = out.json();
    let threads = threads.as_array().expect("threads");
    assert_eq!(
        threads.len(),
        1,
        "no turn ran on the new thread: {threads:?}"
    );
    let detail = host.thread(threads[0]["id"].as_str().unwrap()).await;
    let runs = detail["runs"].as_array().expect("runs");
    let statuses: Vec<_> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["succeeded", "cancelled", "succeeded"],
        "{detail}"
    );
    // The third turn resumed the session the first two ran in.
    assert_eq!(
        runs[2]["resumed_session_id"], runs[0]["session_id"],
        "{detail}"
    );
    assert!(runs[1]["resumed_session_id"].is_null(), "{detail}");
}

/// The `agent pid N` values `/thread` printed, in order.
fn agent_pids(pane: &str) -> Vec<String> {
    pane.lines()
        .filter_map(|l| l.split(" · agent pid ").nth(1))
        .map(|p| p.trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_json_agent_takes_every_turn_on_one_process() {
    let host = Host::new();
    host.fixture_agent("cc", "stream-json", "stream-json");
    let tmux = Tmux::start(&host, &["chat", "--agent", "cc"]).await;
    tmux.wait_count("interactive session", 1).await;
    tmux.line("first").await;
    tmux.wait_count("echo: first", 1).await;
    tmux.line("/thread").await;
    tmux.wait_count(" · agent pid ", 1).await;
    tmux.line("second").await;
    tmux.wait_count("echo: second", 1).await;
    tmux.line("/thread").await;
    let pane = tmux.wait_count(" · agent pid ", 2).await;
    let pids = agent_pids(&pane);
    assert_eq!(pids.len(), 2, "{pane}");
    assert!(pids[0].parse::<u32>().is_ok(), "{pane}");
    assert_eq!(pids[0], pids[1], "one process served both turns: {pane}");
    tmux.send(&["C-d"]).await;
    tmux.wait_count("EXITED=0", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_interrupts_claude_code_and_the_same_process_takes_the_next_line() {
    let host = Host::new();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"cc\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\ncontrol_protocol = true\n",
        agentwire_testkit::bin_path("claude-fixture").display()
    ));
    let tmux = Tmux::start(&host, &["chat", "--agent", "cc"]).await;
    tmux.wait_count("interactive session", 1).await;
    tmux.line("pid").await;
    tmux.wait_count("turn=1 initialized=true", 1).await;
    tmux.line("slow").await;
    tmux.wait_count("working", 1).await;
    tmux.send(&["C-c"]).await;
    tmux.wait_count("cancelled (cancelled)", 1).await;
    tmux.line("pid").await;
    let pane = tmux.wait_count("turn=3 initialized=true", 1).await;
    assert!(
        !pane.contains("a new agent process resumed"),
        "the interrupted process stayed: {pane}"
    );
    let pids: Vec<&str> = pane
        .lines()
        .filter_map(|l| l.split("pid=").nth(1)?.split_whitespace().next())
        .collect();
    assert_eq!(pids.len(), 2, "{pane}");
    assert_eq!(
        pids[0], pids[1],
        "one process before and after the interrupt: {pane}"
    );
    tmux.send(&["C-d"]).await;
    tmux.wait_count("EXITED=0", 1).await;

    let threads = host.run(&["threads", "list", "--json"]).await.json();
    let detail = host.thread(threads[0]["id"].as_str().unwrap()).await;
    let runs = detail["runs"].as_array().expect("runs");
    let statuses: Vec<_> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["succeeded", "cancelled", "succeeded"],
        "{detail}"
    );
    assert!(
        runs.iter().all(|r| r["resumed_session_id"].is_null()),
        "{detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_tool_permission_is_asked_on_the_terminal_showing_tool_and_input() {
    let host = Host::new();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"cc\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\ncontrol_protocol = true\n",
        agentwire_testkit::bin_path("claude-fixture").display()
    ));
    let tmux = Tmux::start(&host, &["chat", "--agent", "cc"]).await;
    tmux.wait_count("interactive session", 1).await;
    tmux.line("tool").await;
    let pane = tmux.wait_count("allow? [y/N]", 1).await;
    assert!(
        pane.contains(r#"asks to use tool Bash with input {"command":"echo hi"}"#),
        "{pane}"
    );
    tmux.line("y").await;
    tmux.wait_count(r#"allowed: {"command":"echo hi"}"#, 1)
        .await;
    tmux.line("tool").await;
    tmux.wait_count("allow? [y/N]", 2).await;
    tmux.line("no").await;
    tmux.wait_count("denied: denied by the user in awp-host", 1)
        .await;
    tmux.send(&["C-d"]).await;
    tmux.wait_count("EXITED=0", 1).await;
}

fn claude_code_fixture(host: &Host) {
    host.agents_toml(&format!(
        "[[agents]]\nname = \"cc\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\ncontrol_protocol = true\n",
        agentwire_testkit::bin_path("claude-fixture").display()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_claude_codes_tool_question_denies_at_once_and_the_prompt_gets_the_next_line() {
    let host = Host::new();
    claude_code_fixture(&host);
    let tmux = Tmux::start(&host, &["chat", "--agent", "cc"]).await;
    tmux.wait_count("interactive session", 1).await;
    tmux.line("tool").await;
    tmux.wait_count("allow? [y/N]", 1).await;
    // Ctrl-C, no Enter: the question is denied at once and the turn is cancelled (Claude Code gets `interrupt`).
    tmux.send(&["C-c"]).await;
    tmux.wait_count("denied: interrupted by the user (Ctrl-C) in awp-host", 1)
        .await;
    tmux.wait_count("cancelling the turn", 1).await;
    // No reader of the question is left behind: the next line reaches the prompt and is a turn of the same
    // process.
    tmux.line("pid").await;
    let pane = tmux.wait_count("turn=2 initialized=true", 1).await;
    assert!(
        !pane.contains("a new agent process resumed"),
        "the process stayed: {pane}"
    );
    tmux.send(&["C-d"]).await;
    tmux.wait_count("EXITED=0", 1).await;
    let threads = host.run(&["threads", "list", "--json"]).await.json();
    let detail = host.thread(threads[0]["id"].as_str().unwrap()).await;
    let runs = detail["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{detail}");
    assert_eq!(runs[1]["status"], "succeeded", "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_a_one_shot_chats_tool_question_ends_the_turn_without_enter() {
    let host = Host::new();
    claude_code_fixture(&host);
    let tmux = Tmux::start(&host, &["chat", "--agent", "cc", "tool"]).await;
    tmux.wait_count("allow? [y/N]", 1).await;
    tmux.send(&["C-c"]).await;
    let pane = tmux.wait_count("EXITED=", 1).await;
    assert!(
        pane.contains("denied: interrupted by the user (Ctrl-C) in awp-host"),
        "{pane}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_an_acp_permission_question_cancels_at_once_and_leaves_no_reader_behind() {
    let host = Host::new();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"tools\"]\n",
        agentwire_testkit::bin_path("acp-fixture").display()
    ));
    let tmux = Tmux::start(&host, &["chat", "--agent", "acp"]).await;
    tmux.wait_count("interactive session", 1).await;
    tmux.line("go").await;
    tmux.wait_count("choose a number", 1).await;
    tmux.send(&["C-c"]).await;
    let pane = tmux.wait_count("cancelled (cancelled)", 1).await;
    // The pending question was answered `cancelled` (ACP v1 "Cancellation"), not with a reject option: the
    // fixture reports the outcome it got as the tool call's result.
    assert!(pane.contains("↳ error: cancelled"), "{pane}");
    assert!(!pane.contains("selected reject"), "{pane}");
    // The question's reader ended with it: the next line is a turn (asking again), and its answer is read.
    tmux.line("again").await;
    tmux.wait_count("choose a number", 2).await;
    tmux.line("1").await;
    tmux.wait_count("selected allow", 1).await;
    // Ctrl-D once the turn has ended and the prompt reads again (an EOF typed while a turn runs, with the
    // terminal in cooked mode, is not type-ahead the prompt can see).
    tmux.wait_count("[succeeded", 1).await;
    tmux.send(&["C-d"]).await;
    tmux.wait_count("EXITED=0", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_a_one_shot_chats_acp_permission_question_answers_cancelled() {
    let host = Host::new();
    let trace = host.config.join("trace.log");
    host.agents_toml(&format!(
        "[[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"tools\"]\nenv = {{ ACP_FIXTURE_TRACE = \"{}\" }}\n",
        agentwire_testkit::bin_path("acp-fixture").display(),
        trace.display()
    ));
    let tmux = Tmux::start(&host, &["chat", "--agent", "acp", "go"]).await;
    tmux.wait_count("choose a number", 1).await;
    tmux.send(&["C-c"]).await;
    let pane = tmux.wait_count("EXITED=", 1).await;
    assert!(pane.contains("EXITED=7"), "{pane}");
    assert!(pane.contains("↳ error: cancelled"), "{pane}");
    assert!(!pane.contains("selected reject"), "{pane}");
    // ACP v1 "Cancellation": session/cancel first, then the pending request answered `cancelled`.
    let sent = std::fs::read_to_string(&trace).expect("trace");
    let client: Vec<&str> = sent.lines().filter(|l| l.starts_with("client ")).collect();
    let cancel = client
        .iter()
        .position(|l| l.contains("\"method\":\"session/cancel\""));
    let answer = client
        .iter()
        .position(|l| l.contains("\"outcome\":{\"outcome\":\"cancelled\"}"));
    assert!(
        matches!((cancel, answer), (Some(c), Some(a)) if c < a),
        "{sent}"
    );
}
