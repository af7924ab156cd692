//! The agent never outlives the host: `kill -9` of `awp-host` kills its agent (Linux parent-death signal), and a
//! thread whose dead host left a live agent group behind refuses a new turn (`thread_busy`) until that group is
//! gone.

mod support;

use std::time::Duration;

use agentwire_testkit::proc::{is_alive, wait_gone};
use support::{Host, read_until, thread_id};

fn db(host: &Host) -> rusqlite::Connection {
    rusqlite::Connection::open(host.data.join("awp-host.sqlite3")).expect("open db")
}

fn agent_pid(host: &Host) -> u32 {
    let pid: i64 = db(host)
        .query_row(
            "SELECT agent_pid FROM runs WHERE status='running'",
            [],
            |r| r.get(0),
        )
        .expect("the running run recorded its agent's pid");
    u32::try_from(pid).expect("a positive pid")
}

/// Configures agent `fx`: it stays in its turn and would survive anything but SIGKILL: it ignores
/// SIGINT/SIGTERM/SIGHUP, reports session `h1`, closes its stdin (so the host's death is no EOF to it) and becomes
/// one long `sleep` (same pid, no grandchild).
fn stubborn_agent(host: &Host) {
    let script = host.path("stubborn.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ntrap \"\" INT TERM HUP\nread -r l\necho '{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"h1\"}'\nexec 0<&- sleep 600\n",
    )
    .expect("write script");
    let mut perms = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod");
    host.agents_toml(&format!(
        "[[agents]]\nname = \"fx\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\n",
        script.display()
    ));
}

fn kill(pid: u32, signal: rustix::process::Signal) {
    let pid =
        rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid fits i32")).expect("pid");
    rustix::process::kill_process(pid, signal).expect("send signal");
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_host_with_sigkill_kills_its_agent_and_a_follow_up_succeeds() {
    let host = Host::new();
    stubborn_agent(&host);
    let mut chat = host.spawn(&["chat", "--agent", "fx", "--jsonl", "stay"]);
    let mut stdout = chat.take_stdout().expect("stdout");
    // The agent is in its turn (it reported its session and will never end the turn).
    read_until(&mut stdout, "h1").await;
    let agent = agent_pid(&host);
    assert!(is_alive(agent));
    let thread: String = db(&host)
        .query_row("SELECT thread_id FROM runs", [], |r| r.get(0))
        .expect("thread");
    kill(
        chat.id().expect("host running"),
        rustix::process::Signal::KILL,
    );
    tokio::spawn(async move { while stdout.next().await.is_some() {} });
    assert_eq!(chat.wait().await.signal, Some(9));
    // The parent-death signal (SIGKILL) ended the agent with its host: no stop ladder ran, and nothing else would
    // have ended this agent.
    assert!(
        wait_gone(agent, Duration::from_secs(20)).await,
        "agent {agent} outlived its host"
    );
    // The follow-up finds the dead run (lock free, agent group gone), marks it interrupted and runs.
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let next = host
        .run(&["chat", "--thread", &thread, "--jsonl", "again"])
        .await;
    assert_eq!(next.code, 0, "{next:?}");
    assert_eq!(thread_id(&next), thread);
    let detail = host.thread(&thread).await;
    assert_eq!(detail["runs"][0]["status"], "interrupted", "{detail}");
    assert!(
        detail["runs"][0]["error"]["reason"]
            .as_str()
            .is_some_and(|why| why.contains("ended before the turn did")),
        "an interrupted run says why: {detail}"
    );
    assert_eq!(detail["runs"][1]["status"], "succeeded", "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_agent_left_by_a_dead_host_keeps_its_thread_busy() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let first = host.run(&["chat", "--agent", "fx", "--jsonl", "one"]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let thread = thread_id(&first);
    // What a host killed mid-turn leaves when its agent survived (no parent-death signal on this platform, or a
    // grandchild in the agent's group): a `running` run, no lock holder, a live agent group. A `sleep` in its
    // own process group stands in for that agent.
    let mut orphan = agentwire_process::Command::new("sleep");
    orphan.arg("600").inherit_os_env();
    let orphan = orphan.spawn().expect("spawn sleep");
    let pid = orphan.id().expect("running");
    db(&host)
        .execute(
            "UPDATE runs SET status='running', ended_at_ms=NULL, agent_pid=?1",
            [i64::from(pid)],
        )
        .expect("update");
    let refused = host
        .run(&["chat", "--thread", &thread, "--json", "two"])
        .await;
    assert_eq!(refused.code, 3, "{refused:?}");
    assert_eq!(refused.json()["error"]["code"], "thread_busy");
    // The message names the orphan and how to end it.
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains(&format!(
            "its agent (pid {pid}, process group {pid}) still runs"
        )) && message.contains(&format!("kill -TERM -- -{pid}")),
        "{message}"
    );
    // Opening the store (any command) leaves that run running while its agent lives.
    let listed = host.run(&["threads", "list", "--json"]).await;
    assert!(!listed.stderr.contains("marked interrupted"), "{listed:?}");
    assert_eq!(listed.json()[0]["last_run_status"], "running");
    // Once the agent is gone the thread takes turns again; the dead run is marked interrupted.
    kill(pid, rustix::process::Signal::KILL);
    orphan.wait().await;
    assert!(wait_gone(pid, Duration::from_secs(20)).await);
    let next = host
        .run(&["chat", "--thread", &thread, "--jsonl", "three"])
        .await;
    assert_eq!(next.code, 0, "{next:?}");
    let detail = host.thread(&thread).await;
    assert_eq!(detail["runs"][0]["status"], "interrupted", "{detail}");
    assert!(
        detail["runs"][0]["error"]["reason"]
            .as_str()
            .is_some_and(|why| why.contains("ended before the turn did")),
        "an interrupted run says why: {detail}"
    );
    assert_eq!(detail["runs"][1]["status"], "succeeded", "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_records_the_run_as_aborted_and_prints_its_ids() {
    for format in ["--jsonl", "--human"] {
        let host = Host::new();
        stubborn_agent(&host);
        let mut args = vec!["chat", "--agent", "fx", "stay"];
        if format == "--jsonl" {
            args.insert(3, format);
        }
        let mut chat = host.spawn(&args);
        let mut stdout = chat.take_stdout().expect("stdout");
        let host_pid = chat.id().expect("host running");
        // In its turn: the agent's pid is recorded once it runs (its `h1` line is not printed in human output).
        let agent = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                // Never create the database here: only read it once the host made it.
                let pid: Option<i64> = rusqlite::Connection::open_with_flags(
                    host.data.join("awp-host.sqlite3"),
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE,
                )
                .ok()
                .and_then(|c| {
                    c.query_row("SELECT agent_pid FROM runs", [], |r| r.get(0))
                        .ok()
                })
                .flatten();
                if let Some(pid) = pid {
                    break u32::try_from(pid).expect("pid");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the run recorded its agent");
        kill(host_pid, rustix::process::Signal::INT);
        // The second Ctrl-C after the first was taken (its notice), while the stop ladder waits on the agent.
        let noticed = tokio::time::timeout(Duration::from_secs(60), async {
            while !chat
                .stderr_tail()
                .tail_lossy()
                .contains("cancelling the turn")
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(noticed.is_ok(), "{}", chat.stderr_tail().tail_lossy());
        kill(host_pid, rustix::process::Signal::INT);
        let out = support::collect_from(&mut chat, &mut stdout).await;
        assert_eq!(out.code, 130, "{format}: {out:?}");
        assert!(
            wait_gone(agent, Duration::from_secs(20)).await,
            "agent {agent} still alive"
        );
        let (thread, run): (String, String) = db(&host)
            .query_row("SELECT thread_id, id FROM runs", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("run");
        // The ids are printed: on stderr (status line and error), and in the --jsonl result record.
        assert!(out.stderr.contains(&format!("thread {thread}")), "{out:?}");
        assert!(out.stderr.contains(&format!("run {run}")), "{out:?}");
        assert!(out.stderr.contains("(aborted)"), "{out:?}");
        if format == "--jsonl" {
            let record = support::result_record(&out);
            assert_eq!(record["thread_id"], thread.as_str(), "{out:?}");
            assert_eq!(record["run_id"], run.as_str());
            assert_eq!(record["status"], "cancelled");
            assert_eq!(record["error"]["code"], "aborted", "{record}");
        }
        // Recorded: cancelled with code aborted, never left running.
        let detail = host.thread(&thread).await;
        assert_eq!(detail["runs"][0]["status"], "cancelled", "{detail}");
        assert_eq!(detail["runs"][0]["error"]["code"], "aborted", "{detail}");
    }
}
