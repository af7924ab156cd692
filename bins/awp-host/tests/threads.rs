//! Thread management end to end with the real binary: `chat --continue`, thread id prefixes, `threads delete`,
//! `threads rename` and `threads export`.

mod support;

use support::{Host, result_record, thread_id};

/// Adds a thread row with a chosen id straight into the store (after a first chat created the database), so
/// that two ids share a prefix without drawing random ids until they do.
fn insert_thread(host: &Host, id: &str) {
    let conn = rusqlite::Connection::open(host.data.join("awp-host.sqlite3")).expect("open db");
    conn.execute(
        "INSERT INTO threads (id, agent, title, created_at_ms, updated_at_ms) VALUES (?1, 'fx', 'manual', 1, 1)",
        [id],
    )
    .expect("insert thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_continue_continues_the_most_recent_thread() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    // Nothing to continue yet: a typed usage error, one JSON object.
    let none = host.run(&["chat", "-c", "--json", "hi"]).await;
    assert_eq!(none.code, 2, "{none:?}");
    assert_eq!(none.json()["error"]["code"], "no_threads");
    let first = host.run(&["chat", "--agent", "fx", "--jsonl", "one"]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let second = host.run(&["chat", "--agent", "fx", "--jsonl", "two"]).await;
    assert_eq!(second.code, 0, "{second:?}");
    let latest = thread_id(&second);
    let cont = host.run(&["chat", "--continue", "--jsonl", "three"]).await;
    assert_eq!(cont.code, 0, "{cont:?}");
    assert_eq!(thread_id(&cont), latest);
    // The turn resumed the thread's session (the fixture reports the id it was resumed with).
    assert_eq!(
        result_record(&cont)["session_id"],
        result_record(&second)["session_id"]
    );
    let short = host.run(&["chat", "-c", "--jsonl", "four"]).await;
    assert_eq!(thread_id(&short), latest, "{short:?}");
    let detail = host.thread(&latest).await;
    assert_eq!(detail["thread"]["run_count"], 3);
    // --continue names a thread: it cannot be combined with another choice of thread.
    for other in [["--thread", latest.as_str()], ["--cwd", "/"]] {
        let out = host
            .run(&["chat", "-c", other[0], other[1], "--json", "x"])
            .await;
        assert_eq!(out.code, 2, "{out:?}");
        assert_eq!(out.json()["error"]["code"], "argument_conflict");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_ids_are_accepted_by_a_unique_prefix() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let first = host.run(&["chat", "--agent", "fx", "--jsonl", "one"]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let id = thread_id(&first);
    // Two more ids that share a prefix no random id can have (their digits after it differ from `id`'s only if
    // `id` does not start with them; pick a first digit `id` does not have).
    let digit = if id.as_bytes()[3] == b'a' { 'b' } else { 'a' };
    insert_thread(&host, &format!("th_{digit}{digit}00000000000001"));
    insert_thread(&host, &format!("th_{digit}{digit}00000000000002"));
    // Unique prefixes, with and without `th_`, resolve everywhere a thread id is taken.
    let with = &id[..7];
    let without = &id[3..8];
    let shown = host.run(&["threads", "show", with, "--json"]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert_eq!(shown.json()["thread"]["id"], id.as_str());
    let follow = host
        .run(&["chat", "--thread", without, "--jsonl", "two"])
        .await;
    assert_eq!(follow.code, 0, "{follow:?}");
    assert_eq!(thread_id(&follow), id);
    let unique = format!("{digit}{digit}00000000000002");
    let exported = host
        .run(&["threads", "export", &unique, "--format", "jsonl"])
        .await;
    assert_eq!(exported.code, 0, "{exported:?}");
    assert_eq!(
        exported.jsonl()[0]["id"],
        format!("th_{digit}{digit}00000000000002")
    );
    // An ambiguous prefix: a typed usage error listing the candidates.
    let ambiguous = format!("th_{digit}{digit}");
    for args in [
        vec!["threads", "show", &ambiguous, "--json"],
        vec!["chat", "--thread", &ambiguous, "--json", "x"],
        vec!["threads", "delete", &ambiguous, "--json"],
    ] {
        let out = host.run(&args).await;
        assert_eq!(out.code, 2, "{out:?}");
        let error = &out.json()["error"];
        assert_eq!(error["code"], "thread_ambiguous", "{out:?}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("th_{digit}{digit}00000000000001"))
                && message.contains(&format!("th_{digit}{digit}00000000000002")),
            "{message}"
        );
        assert!(out.stderr.contains("(thread_ambiguous)"), "{out:?}");
    }
    // No match, and text that cannot start an id.
    let no_match = format!("th_{digit}{digit}1");
    let out = host.run(&["threads", "show", &no_match, "--json"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.json()["error"]["code"], "thread_not_found");
    let out = host.run(&["threads", "show", "th_%", "--json"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    let error = &out.json()["error"];
    assert_eq!(error["code"], "invalid_id");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("or a unique prefix of one")),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_rename_sets_the_title_and_validates_it() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let first = host.run(&["chat", "--agent", "fx", "--jsonl", "one"]).await;
    let id = thread_id(&first);
    let out = host
        .run(&["threads", "rename", &id, "Release", "notes", "--json"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["title"], "Release notes");
    let human = host.run(&["threads", "rename", &id[..8], "Shorter"]).await;
    assert_eq!(human.code, 0, "{human:?}");
    assert_eq!(human.stdout, format!("renamed thread {id}: Shorter\n"));
    assert_eq!(host.thread(&id).await["thread"]["title"], "Shorter");
    // Inner runs of whitespace (in one word or between words) collapse to one space.
    let out = host
        .run(&[
            "threads",
            "rename",
            &id,
            "Release   notes ",
            " v2",
            "--json",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["title"], "Release notes v2");
    // A tab or newline is whitespace too.
    let out = host
        .run(&["threads", "rename", &id, "a\tb\n c", "--json"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["title"], "a b c");
    // 80 characters is the bound; 81 is refused, as is a control character.
    let at_bound = "x".repeat(80);
    let out = host.run(&["threads", "rename", &id, &at_bound]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let over = "x".repeat(81);
    for bad in [over.as_str(), "a\u{1b}[2Jb", "   "] {
        let out = host.run(&["threads", "rename", &id, bad, "--json"]).await;
        assert_eq!(out.code, 2, "{out:?}");
        assert_eq!(out.json()["error"]["code"], "invalid_title");
    }
    assert_eq!(host.thread(&id).await["thread"]["title"], at_bound.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_delete_removes_the_thread_with_its_runs_and_refuses_a_busy_one() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let keep = host
        .run(&["chat", "--agent", "fx", "--jsonl", "keep"])
        .await;
    let first = host.run(&["chat", "--agent", "fx", "--jsonl", "one"]).await;
    let id = thread_id(&first);
    let second = host.run(&["chat", "--thread", &id, "--jsonl", "two"]).await;
    assert_eq!(second.code, 0, "{second:?}");
    let out = host.run(&["threads", "delete", &id, "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.json(),
        serde_json::json!({"deleted": {"id": id, "runs": 2, "messages": 4}})
    );
    let gone = host.run(&["threads", "show", &id, "--json"]).await;
    assert_eq!(gone.code, 2, "{gone:?}");
    assert_eq!(gone.json()["error"]["code"], "thread_not_found");
    let list = host.run(&["threads", "list", "--json"]).await.json();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [thread_id(&keep).as_str()]);
    // Nothing of the thread is left in any table.
    let conn = rusqlite::Connection::open(host.data.join("awp-host.sqlite3")).unwrap();
    let left: i64 = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM runs WHERE thread_id=?1)
                  + (SELECT COUNT(*) FROM messages WHERE thread_id=?1)
                  + (SELECT COUNT(*) FROM sessions WHERE thread_id=?1)",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);

    // A thread with a live turn (the `silence` agent stays in its turn) is refused with thread_busy.
    host.agents_toml(
        "[[agents]]\nname = \"quiet\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"silence\"]\n",
    );
    let mut live = host.spawn(&["chat", "--agent", "quiet", "--jsonl", "wait"]);
    let mut stdout = live.take_stdout().expect("stdout");
    support::read_until(&mut stdout, "text_delta").await;
    let list = host.run(&["threads", "list", "--json"]).await.json();
    let busy = list[0]["id"].as_str().unwrap().to_owned();
    let out = host.run(&["threads", "delete", &busy, "--json"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.json()["error"]["code"], "thread_busy");
    // Once the turn is cancelled the thread can go.
    let raw = i32::try_from(live.id().expect("running")).expect("pid fits i32");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(raw).expect("pid"),
        rustix::process::Signal::INT,
    )
    .expect("signal");
    tokio::spawn(async move { while stdout.next().await.is_some() {} });
    assert_eq!(live.wait().await.code, Some(7));
    let out = host.run(&["threads", "delete", &busy]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .starts_with(&format!("deleted thread {busy} (1 runs")),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_export_writes_a_markdown_transcript_and_jsonl_records() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let first = host
        .run(&["chat", "--agent", "fx", "--jsonl", "hello"])
        .await;
    let id = thread_id(&first);
    let second = host
        .run(&["chat", "--thread", &id, "--jsonl", "line one\nline two"])
        .await;
    assert_eq!(second.code, 0, "{second:?}");
    let md = host.run(&["threads", "export", &id]).await;
    assert_eq!(md.code, 0, "{md:?}");
    let text = &md.stdout;
    assert!(text.starts_with("# hello\n"), "{text}");
    assert!(text.contains(&format!("- thread: `{id}`")), "{text}");
    assert!(text.contains("## Turn 1"), "{text}");
    assert!(text.contains("## Turn 2"), "{text}");
    assert!(text.contains("**You:**\n\n> hello\n"), "{text}");
    assert!(text.contains("> line one\n> line two\n"), "{text}");
    assert!(text.contains("**fx:**\n\necho: hello\n"), "{text}");
    assert!(text.contains("_succeeded · 5 in / 11 out_"), "{text}");
    // The Markdown turns are in order.
    assert!(text.find("## Turn 1").unwrap() < text.find("## Turn 2").unwrap());

    let jl = host
        .run(&["threads", "export", &id[..9], "--format", "jsonl"])
        .await;
    assert_eq!(jl.code, 0, "{jl:?}");
    let records = jl.jsonl();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "thread", "run", "message", "message", "run", "message", "message"
        ]
    );
    assert_eq!(records[0]["id"], id.as_str());
    assert_eq!(records[0]["run_count"], 2);
    let detail = host.thread(&id).await;
    // Each run record is the run of `threads show --json`, each message belongs to the run before it.
    assert_eq!(records[1]["id"], detail["runs"][0]["id"], "{records:?}");
    assert_eq!(records[4]["id"], detail["runs"][1]["id"]);
    assert_eq!(records[2]["run_id"], records[1]["id"]);
    assert_eq!(records[6]["run_id"], records[4]["id"]);
    assert_eq!(records[5]["role"], "user");
    assert_eq!(records[5]["content"], "line one\nline two");
    assert_eq!(records[6]["content"], "echo: line one\nline two");

    // A bad format is a usage error; an unknown thread a typed one.
    let bad = host
        .run(&["threads", "export", &id, "--format", "html", "--json"])
        .await;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert_eq!(bad.json()["error"]["code"], "invalid_value");
    let none = host
        .run(&["threads", "export", "th_0000000000000000", "--json"])
        .await;
    assert_eq!(none.code, 2, "{none:?}");
    assert_eq!(none.json()["error"]["code"], "thread_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_the_agent_reports_is_shown_and_threads_list_shows_the_last_run_status() {
    let host = Host::new();
    host.agents_toml(
        "[[agents]]\nname = \"paid\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"normal\", \"--cost-usd\", \"0.0125\"]\n\
         [[agents]]\nname = \"broken\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"error-result\"]\n",
    );
    // The status line carries the cost the agent reported in its result.
    let first = host.run(&["chat", "--agent", "paid", "one"]).await;
    assert_eq!(first.code, 0, "{first:?}");
    assert!(
        first
            .stderr
            .contains("[succeeded · 3 in / 9 out tokens · $0.0125 · "),
        "{first:?}"
    );
    let list = host.run(&["threads", "list", "--json"]).await.json();
    let paid = list[0]["id"].as_str().unwrap().to_owned();
    let second = host
        .run(&["chat", "--thread", &paid, "--jsonl", "two"])
        .await;
    assert_eq!(result_record(&second)["total_cost_usd"], 0.0125);
    // `threads show`: each run's cost and the total.
    let shown = host.run(&["threads", "show", &paid]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert_eq!(shown.stdout.matches("  $0.0125").count(), 2, "{shown:?}");
    assert!(shown.stdout.contains("total cost: $0.0250\n"), "{shown:?}");
    let detail = host.thread(&paid).await;
    assert_eq!(detail["runs"][1]["total_cost_usd"], 0.0125);
    assert_eq!(detail["thread"]["last_run_status"], "succeeded");
    // An agent that reports no cost shows none.
    let failed = host.run(&["chat", "--agent", "broken", "x"]).await;
    assert_eq!(failed.code, 6, "{failed:?}");
    assert!(!failed.stderr.contains('$'), "{failed:?}");
    // `threads list`: the last run's status of each thread (table column LAST, JSON last_run_status).
    let list = host.run(&["threads", "list", "--json"]).await.json();
    let status: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap(),
                t["last_run_status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(status.len(), 2);
    assert_eq!(status[1], (paid.as_str(), "succeeded"));
    assert_eq!(status[0].1, "failed");
    let table = host.run(&["threads", "list"]).await;
    let mut lines = table.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID",
            "AGENT",
            "RUNS",
            "LAST",
            "UPDATED",
            "DIRECTORY",
            "TITLE"
        ]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[..4], [status[0].0, "broken", "1", "failed"]);
    // The transcript carries the total cost too.
    let md = host.run(&["threads", "export", &paid]).await;
    assert!(md.stdout.contains("- cost: $0.0250\n"), "{md:?}");
    assert!(
        md.stdout.contains("_succeeded · 3 in / 9 out · $0.0125_"),
        "{md:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_export_shows_each_tool_line_with_one_symbol() {
    let host = Host::new();
    host.fixture_agent("fx", "tool-use", "awp-jsonl");
    let out = host.run(&["chat", "--agent", "fx", "--jsonl", "go"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let id = thread_id(&out);
    let md = host.run(&["threads", "export", &id]).await;
    assert_eq!(md.code, 0, "{md:?}");
    let tool_lines: Vec<&str> = md
        .stdout
        .lines()
        .filter(|l| l.contains('⚙') || l.contains('↳'))
        .collect();
    assert!(
        tool_lines.iter().any(|l| l.starts_with("`⚙ Bash "))
            && tool_lines.iter().any(|l| l.starts_with("`↳ ")),
        "a tool use and its result: {}",
        md.stdout
    );
    for line in &tool_lines {
        let symbols = line.matches(['⚙', '↳']).count();
        assert_eq!(symbols, 1, "{line}");
        assert!(
            line.starts_with("`⚙ Bash ") || line.starts_with("`↳ "),
            "{line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuing_a_thread_whose_agent_was_removed_says_it_is_the_threads_agent() {
    let host = Host::new();
    host.fixture_agent("tmp", "normal", "awp-jsonl");
    let first = host
        .run(&["chat", "--agent", "tmp", "--jsonl", "hello"])
        .await;
    assert_eq!(first.code, 0, "{first:?}");
    let id = thread_id(&first);
    host.agents_toml("");
    for args in [
        &["chat", "-c", "more", "--json"][..],
        &["chat", "--thread", &id, "more", "--json"][..],
    ] {
        let out = host.run(args).await;
        assert_eq!(out.code, 2, "{out:?}");
        let error = &out.json()["error"];
        assert_eq!(error["code"], "agent_not_found");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "thread {id} belongs to agent `tmp`, which is no longer configured"
            )) && message.contains("--new --agent NAME"),
            "{message}"
        );
    }
    // Naming an unknown agent yourself keeps the plain message.
    let out = host
        .run(&["chat", "--new", "--agent", "ghost", "x", "--json"])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
    let message = out.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.starts_with("no agent named `ghost`"), "{message}");
}
