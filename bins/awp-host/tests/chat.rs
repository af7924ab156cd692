//! `awp-host chat` end to end: the real binary, real agent processes (bundled `awp-agent`, `awp-fixture`),
//! real SQLite files in temp dirs.

mod support;

use serde_json::Value;
use support::{Host, result_record, thread_id};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_with_the_bundled_agent_answers_and_persists() {
    let host = Host::new();
    let out = host.run(&["chat", "hello there"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "You said: hello there (turn 1 of this session)\n"
    );
    assert!(out.stderr.contains("[succeeded · "), "{out:?}");
    let list = host.run(&["threads", "list", "--json"]).await.json();
    let id = list[0]["id"].as_str().unwrap();
    assert_eq!(list[0]["title"], "hello there");
    let detail = host.thread(id).await;
    let messages: Vec<(&str, &str)> = detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        messages,
        [
            ("user", "hello there"),
            (
                "assistant",
                "You said: hello there (turn 1 of this session)"
            )
        ]
    );
    assert_eq!(detail["runs"][0]["status"], "succeeded");
    assert!(
        detail["thread"]["session_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("awp-"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_resumes_the_agent_session() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let first = host.run(&["chat", "--agent", "fx", "--jsonl", "one"]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let first_record = result_record(&first);
    let session = first_record["session_id"].as_str().unwrap().to_owned();
    let thread = thread_id(&first);
    // Without --resume the fixture invents a fresh id; reporting the same id proves it saw `--resume <id>`.
    let second = host
        .run(&["chat", "--thread", &thread, "--jsonl", "two"])
        .await;
    assert_eq!(second.code, 0, "{second:?}");
    assert_eq!(result_record(&second)["session_id"], session.as_str());
    let detail = host.thread(&thread).await;
    assert_eq!(detail["runs"][1]["resumed_session_id"], session.as_str());
    assert_eq!(detail["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(detail["thread"]["run_count"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_that_reports_a_different_id_stores_both() {
    let host = Host::new();
    host.fixture_agent("fx", "resume-different-id", "awp-jsonl");
    let first = host.run(&["chat", "--agent", "fx", "--jsonl", "one"]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let a = result_record(&first)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let thread = thread_id(&first);
    let second = host
        .run(&["chat", "--thread", &thread, "--jsonl", "two"])
        .await;
    assert_eq!(second.code, 0, "{second:?}");
    let b = format!("{a}.fork");
    assert_eq!(result_record(&second)["session_id"], b.as_str());
    let detail = host.thread(&thread).await;
    assert_eq!(detail["thread"]["session_id"], b.as_str());
    let history: Vec<&str> = detail["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(history, [a.as_str(), b.as_str()]);
    // The next turn resumes the latest id.
    let third = host
        .run(&["chat", "--thread", &thread, "--jsonl", "three"])
        .await;
    assert_eq!(
        host.thread(&thread).await["runs"][2]["resumed_session_id"],
        b.as_str(),
        "{third:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_json_text_is_rendered_once() {
    let host = Host::new();
    host.fixture_agent("claude-like", "stream-json", "stream-json");
    let out = host
        .run(&["chat", "--agent", "claude-like", "hi there"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "echo: hi there\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn banner_lines_are_not_rendered() {
    let host = Host::new();
    host.fixture_agent("noisy", "banner", "awp-jsonl");
    let out = host
        .run(&["chat", "--agent", "noisy", "quiet please"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "echo: quiet please\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonl_ends_with_one_result_record() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let out = host.run(&["chat", "--agent", "fx", "--jsonl", "hey"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines = out.jsonl();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["session_started", "text_delta", "text_delta", "result"]
    );
    let record = &lines[3];
    let keys: Vec<&str> = record
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in [
        "thread_id",
        "run_id",
        "session_id",
        "status",
        "usage",
        "error",
        "duration_ms",
    ] {
        assert!(keys.contains(&key), "missing {key} in {record}");
    }
    assert_eq!(record["status"], "succeeded");
    assert_eq!(record["error"], Value::Null);
    assert_eq!(record["usage"]["input_tokens"], 3);
    assert_eq!(record["usage"]["output_tokens"], 9);
    assert!(record["run_id"].as_str().unwrap().starts_with("run_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_prints_one_object_with_the_full_text() {
    let host = Host::new();
    host.fixture_agent("fx", "tool-use", "awp-jsonl");
    let out = host
        .run(&["chat", "--agent", "fx", "--json", "run it"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["type"], "result");
    assert_eq!(v["text"], "tool said: run it");
    let detail = host.thread(v["thread_id"].as_str().unwrap()).await;
    let roles: Vec<&str> = detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "tool", "tool", "assistant"]);
    assert!(
        detail["messages"][1]["content"]
            .as_str()
            .unwrap()
            .starts_with("⚙ Bash {")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_use_renders_a_bounded_summary_line() {
    let host = Host::new();
    host.fixture_agent("fx", "tool-use", "awp-jsonl");
    let out = host.run(&["chat", "--agent", "fx", "go"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("⚙ Bash {"), "{out:?}");
    assert!(lines.iter().all(|l| l.chars().count() <= 120), "{out:?}");
    assert_eq!(lines.last(), Some(&"tool said: go"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_from_stdin_and_its_limit() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let out = host
        .run_with_stdin(&["chat", "--agent", "fx", "-"], b"from stdin")
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "echo: from stdin\n"),
        "{out:?}"
    );
    let at_limit = vec![b'a'; 1024 * 1024];
    let out = host
        .run_with_stdin(&["chat", "--agent", "fx", "--json"], &at_limit)
        .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut over = at_limit;
    over.push(b'a');
    let out = host.run_with_stdin(&["chat", "--agent", "fx"], &over).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("(prompt_too_large)"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_png_attachment_reaches_the_agent_as_an_image_block() {
    let host = Host::new();
    let png = host.path("shot.png");
    std::fs::write(
        &png,
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89",
    )
    .unwrap();
    let out = host
        .run(&["chat", "--attach", png.to_str().unwrap(), "what is this?"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("1 image(s) received"), "{out:?}");
    let list = host.run(&["threads", "list", "--json"]).await.json();
    let detail = host.thread(list[0]["id"].as_str().unwrap()).await;
    assert_eq!(
        detail["messages"][0]["content"],
        "what is this?\n[attachment: shot.png (image/png, 33 bytes)]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_are_bounded_and_typed() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let limit = 10 * 1024 * 1024;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.resize(limit, 0);
    let at_limit = host.path("at.png");
    std::fs::write(&at_limit, &png).unwrap();
    let out = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--attach",
            at_limit.to_str().unwrap(),
            "big",
        ])
        .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    png.push(0);
    let over = host.path("over.png");
    std::fs::write(&over, &png).unwrap();
    let out = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--attach",
            over.to_str().unwrap(),
            "big",
        ])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("(attachment_too_large)"), "{out:?}");
    let binary = host.path("blob.bin");
    std::fs::write(&binary, b"\x7fELF\x02\x01\x01\0\0\0").unwrap();
    let out = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--attach",
            binary.to_str().unwrap(),
            "x",
        ])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("(attachment_unsupported_type)"),
        "{out:?}"
    );
    // A FIFO nobody writes to is refused at once (it used to block the open forever).
    let fifo = host.path("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let out = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--attach",
            fifo.to_str().unwrap(),
            "x",
        ])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("is not a regular file (it is a FIFO) (attachment_not_a_file)"),
        "{out:?}"
    );
    // Nothing was stored for the rejected turns.
    assert_eq!(
        host.run(&["threads", "list", "--json"])
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_controls_are_escaped_in_human_output_and_exact_in_json() {
    let host = Host::new();
    let prompt = "q\u{1b}[31mred\u{7} \u{202e}evil\u{2028}x";
    let out = host.run(&["chat", prompt]).await;
    assert_eq!(out.code, 0, "{out:?}");
    for raw in ['\u{1b}', '\u{7}', '\u{202e}', '\u{2028}'] {
        assert!(!out.stdout.contains(raw), "{raw:?} in {out:?}");
    }
    assert!(out.stdout.contains("q\\u{1b}[31mred\\u{7}"), "{out:?}");
    let json = host.run(&["chat", "--json", prompt]).await.json();
    assert!(json["text"].as_str().unwrap().contains(prompt), "{json}");

    let list = host.run(&["threads", "list"]).await;
    assert!(!list.stdout.contains('\u{202e}'), "{list:?}");
    assert!(list.stdout.contains("\\u{202e}evil\\u{2028}x"), "{list:?}");
    let listed = host.run(&["threads", "list", "--json"]).await.json();
    assert_eq!(listed[0]["title"], "q [31mred  \u{202e}evil\u{2028}x");
    let id = listed[0]["id"].as_str().unwrap();
    let show = host.run(&["threads", "show", id]).await;
    assert!(!show.stdout.contains('\u{1b}'), "{show:?}");
    assert!(show.stdout.contains("q\\u{1b}[31mred\\u{7}"), "{show:?}");
    assert_eq!(host.thread(id).await["messages"][0]["content"], prompt);

    host.agents_toml(
        "[[agents]]\nname = \"fx\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nmodel = \"m\\u0007\"\n",
    );
    let agents = host.run(&["agents", "list"]).await;
    assert!(!agents.stdout.contains('\u{7}'), "{agents:?}");
    assert!(agents.stdout.contains("m\\u{7}"), "{agents:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attachment_name_with_a_newline_cannot_forge_a_header() {
    let host = Host::new();
    let path = host.path("a\nAttachment evil.txt");
    std::fs::write(&path, "notes").unwrap();
    let out = host
        .run(&["chat", "--json", "--attach", path.to_str().unwrap(), "see"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let detail = host.thread(&thread_id(&out)).await;
    let content = detail["messages"][0]["content"].as_str().unwrap();
    assert!(
        content.contains("[attachment: a\\u{a}Attachment evil.txt (text/plain, 5 bytes)]"),
        "{content}"
    );
    assert!(!content.contains("\nAttachment evil"), "{content}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_list_says_how_many_more_there_are() {
    let host = Host::new();
    for prompt in ["one", "two", "three"] {
        assert_eq!(host.run(&["chat", prompt]).await.code, 0);
    }
    let out = host.run(&["threads", "list", "--limit", "1"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.ends_with("(2 more; use --limit)\n"), "{out:?}");
    let all = host.run(&["threads", "list", "--limit", "3"]).await;
    assert!(!all.stdout.contains("more; use --limit"), "{all:?}");
    // Header and rows line up: every row's title starts in the header's TITLE column.
    let lines: Vec<&str> = all.stdout.lines().collect();
    let column = lines[0].find("TITLE").unwrap();
    for row in &lines[1..] {
        let title = row.chars().skip(column).collect::<String>();
        assert!(["one", "two", "three"].contains(&title.as_str()), "{all:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdin_prompt_loses_exactly_one_trailing_newline() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    for (input, stored) in [
        (&b"line\n"[..], "line"),
        (b"crlf\r\n", "crlf"),
        (b"two\n\n", "two\n"),
        (b"none", "none"),
    ] {
        let out = host
            .run_with_stdin(&["chat", "--agent", "fx", "--json", "-"], input)
            .await;
        assert_eq!(out.code, 0, "{out:?}");
        let detail = host.thread(&thread_id(&out)).await;
        assert_eq!(detail["messages"][0]["content"], stored, "{input:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_in_arguments_has_the_same_1_mib_limit() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    // 16 words joined by 15 spaces: exactly 1 MiB (single arguments are capped at 128 KiB by the OS).
    let mut words = vec!["a".repeat(65_535); 15];
    words.push("a".repeat(65_536));
    let mut args = vec!["chat", "--agent", "fx", "--json"];
    args.extend(words.iter().map(String::as_str));
    let out = host.run(&args).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    words.push(String::new());
    let mut args = vec!["chat", "--agent", "fx", "--json"];
    args.extend(words.iter().map(String::as_str));
    // One word more: one more space, one byte over.
    let out = host.run(&args).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("(prompt_too_large)"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stdout_still_reports_the_thread_and_run_ids_on_stderr() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    // stdout is a FIFO whose only reader has already gone: every write of the host fails with EPIPE.
    let fifo = host.path("out.fifo");
    let script = format!(
        "mkfifo '{fifo}' || exit 1; (exec 3<'{fifo}') & exec 4>'{fifo}'; wait; exec '{host_bin}' --data-dir '{data}' --config-dir '{config}' chat --agent fx hello 1>&4 4>&-",
        fifo = fifo.display(),
        host_bin = agentwire_testkit::bin_path("awp-host").display(),
        data = host.data.display(),
        config = host.config.display(),
    );
    let mut cmd = agentwire_process::Command::new("sh");
    cmd.arg("-c").arg(&script).inherit_os_env();
    let mut child = cmd.spawn().expect("spawn sh");
    let out = support::collect(&mut child).await;
    assert_eq!(out.code, 8, "{out:?}");
    assert!(out.stderr.contains("(output_write_failed)"), "{out:?}");
    assert!(out.stderr.contains("thread th_"), "{out:?}");
    assert!(out.stderr.contains("run run_"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_remember_where_they_run() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let project = host.path("project");
    let elsewhere = host.path("elsewhere");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let project_str = project.display().to_string();
    let first = host
        .run_in(&project, &["chat", "--agent", "fx", "--json", "pwd"])
        .await;
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.json()["text"], format!("echo: pwd={project_str}"));
    let thread = thread_id(&first);
    // A follow-up from another directory still runs the agent in the thread's directory.
    let second = host
        .run_in(&elsewhere, &["chat", "--thread", &thread, "--json", "pwd"])
        .await;
    assert_eq!(second.code, 0, "{second:?}");
    assert_eq!(second.json()["text"], format!("echo: pwd={project_str}"));
    assert_eq!(
        host.thread(&thread).await["thread"]["cwd"],
        project_str.as_str()
    );
    let list = host.run(&["threads", "list", "--json"]).await;
    assert_eq!(list.json()[0]["cwd"], project_str.as_str());
    let table = host.run(&["threads", "list"]).await;
    assert!(table.stdout.contains("DIRECTORY"), "{table:?}");
    assert!(table.stdout.contains(&project_str), "{table:?}");
    let shown = host.run(&["threads", "show", &thread]).await;
    assert!(
        shown
            .stdout
            .contains(&format!("directory: {project_str}\n")),
        "{shown:?}"
    );

    // `--cwd DIR` picks the directory of a new thread; it cannot move an existing one.
    let third = host
        .run_in(
            &project,
            &[
                "chat",
                "--agent",
                "fx",
                "--cwd",
                "../elsewhere",
                "--json",
                "pwd",
            ],
        )
        .await;
    assert_eq!(third.code, 0, "{third:?}");
    let elsewhere_str = std::fs::canonicalize(&elsewhere)
        .unwrap()
        .display()
        .to_string();
    assert_eq!(third.json()["text"], format!("echo: pwd={elsewhere_str}"));
    let moved = host
        .run(&["chat", "--thread", &thread, "--cwd", "/", "hi"])
        .await;
    assert_eq!(moved.code, 2, "{moved:?}");
    let missing = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--cwd",
            "/nonexistent/awp-dir",
            "--json",
            "hi",
        ])
        .await;
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(missing.stderr.contains("cwd_invalid"), "{missing:?}");

    // A thread whose directory has gone is refused before anything is launched or recorded.
    std::fs::remove_dir(&project).unwrap();
    let gone = host
        .run_in(&elsewhere, &["chat", "--thread", &thread, "hi"])
        .await;
    assert_eq!(gone.code, 3, "{gone:?}");
    assert!(gone.stderr.contains("thread_cwd_missing"), "{gone:?}");
    assert!(gone.stderr.contains(&project_str), "{gone:?}");
    assert_eq!(host.thread(&thread).await["thread"]["run_count"], 2);
    let shown = host.run(&["threads", "show", &thread]).await;
    assert!(shown.stdout.contains("(gone"), "{shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_whose_directory_now_leads_elsewhere_is_refused() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let project = host.path("project");
    let other = host.path("other");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let first = host
        .run_in(&project, &["chat", "--agent", "fx", "--json", "pwd"])
        .await;
    assert_eq!(first.code, 0, "{first:?}");
    let thread = thread_id(&first);
    // 1. The directory replaced by a link to another one: the agent would run there.
    let kept = host.path("project.kept");
    std::fs::rename(&project, &kept).unwrap();
    std::os::unix::fs::symlink(&other, &project).unwrap();
    let linked = host
        .run_in(&other, &["chat", "--thread", &thread, "--json", "pwd"])
        .await;
    assert_eq!(linked.code, 3, "{linked:?}");
    assert_eq!(linked.json()["error"]["code"], "thread_cwd_replaced");
    let message = linked.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains(&format!("is now a symbolic link to {}", other.display())),
        "{message}"
    );
    let shown = host.run(&["threads", "show", &thread]).await;
    assert!(
        shown.stdout.contains("(is now a symbolic link to"),
        "{shown:?}"
    );
    // 2. Replaced by another directory of the same name (a different inode).
    std::fs::remove_file(&project).unwrap();
    std::fs::create_dir(&project).unwrap();
    let other_dir = host
        .run_in(&other, &["chat", "--thread", &thread, "--json", "pwd"])
        .await;
    assert_eq!(other_dir.code, 3, "{other_dir:?}");
    let error = &other_dir.json()["error"];
    assert_eq!(error["code"], "thread_cwd_replaced");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("is now another directory than when the thread was created"),
        "{error}"
    );
    // Nothing was recorded for the refused turns; the original directory put back is accepted again.
    assert_eq!(host.thread(&thread).await["thread"]["run_count"], 1);
    std::fs::remove_dir(&project).unwrap();
    std::fs::rename(&kept, &project).unwrap();
    let back = host
        .run_in(&other, &["chat", "--thread", &thread, "--json", "pwd"])
        .await;
    assert_eq!(back.code, 0, "{back:?}");
    assert_eq!(
        back.json()["text"],
        format!("echo: pwd={}", project.display())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_says_why_in_the_agents_own_words() {
    let host = Host::new();
    host.agents_toml(
        "[[agents]]\nname = \"errors\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"errors-result\"]\n\
         [[agents]]\nname = \"notjson\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"not-json\"]\n\
         [[agents]]\nname = \"bogus\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"bogus-mode\"]\n",
    );
    // 1. The result's own text (Claude Code's `errors`): in --json, the human error and the stored run.
    let out = host
        .run(&["chat", "--agent", "errors", "--json", "hi"])
        .await;
    assert_eq!(out.code, 6, "{out:?}");
    let record = out.json();
    let why = "No conversation found with session ID: fixture; see the log";
    assert_eq!(record["error"]["code"], "agent_error");
    assert_eq!(record["error"]["reason"], why);
    let thread = record["thread_id"].as_str().unwrap().to_owned();
    let human = host.run(&["chat", "--thread", &thread, "hi"]).await;
    assert_eq!(human.code, 6, "{human:?}");
    assert!(
        human.stderr.contains(&format!("the agent said: {why}")),
        "{human:?}"
    );
    let detail = host.thread(&thread).await;
    assert_eq!(detail["runs"][0]["error"]["reason"], why);
    let shown = host.run(&["threads", "show", &thread]).await;
    assert!(
        shown.stdout.contains(&format!("    why: {why}\n")),
        "{shown:?}"
    );

    // 2. Nothing but non-protocol stdout: say how much and show the first line.
    let out = host
        .run(&["chat", "--agent", "notjson", "--jsonl", "hi"])
        .await;
    assert_eq!(out.code, 6, "{out:?}");
    let record = result_record(&out);
    assert_eq!(
        record["error"]["reason"],
        "the agent printed 3 lines that are not JSON; first: Please log in: open https://login.example/device and enter ABCD"
    );

    // 3. Its stderr, when it exits at once.
    let out = host
        .run(&["chat", "--agent", "bogus", "--json", "hi"])
        .await;
    assert_eq!(out.code, 6, "{out:?}");
    let reason = out.json()["error"]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("bogus-mode"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_mib_stdin_prompt_with_its_trailing_newline_is_accepted() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    for ending in [&b"\n"[..], b"\r\n"] {
        let mut input = vec![b'a'; 1024 * 1024];
        input.extend_from_slice(ending);
        let out = host
            .run_with_stdin(&["chat", "--agent", "fx", "--json", "-"], &input)
            .await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let detail = host.thread(&thread_id(&out)).await;
        assert_eq!(
            detail["messages"][0]["content"].as_str().map(str::len),
            Some(1024 * 1024)
        );
        // One byte more than the limit is still refused, newline or not.
        let mut over = vec![b'a'; 1024 * 1024 + 1];
        over.extend_from_slice(ending);
        let out = host
            .run_with_stdin(&["chat", "--agent", "fx", "-"], &over)
            .await;
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stderr.contains("(prompt_too_large)"), "{out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_show_says_why_any_past_run_failed() {
    let host = Host::new();
    host.agents_toml(
        "[[agents]]\nname = \"plain\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"error-result\"]\n\
         [[agents]]\nname = \"badid\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"invalid-session-id\"]\n",
    );
    // An error whose only words are the host's detail: the stored run keeps that detail as its reason.
    let out = host
        .run(&["chat", "--agent", "plain", "--json", "hi"])
        .await;
    assert_eq!(out.code, 6, "{out:?}");
    let thread = out.json()["thread_id"].as_str().unwrap().to_owned();
    let detail = host.thread(&thread).await;
    let reason = detail["runs"][0]["error"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("fixture_failure"), "{detail}");
    let shown = host.run(&["threads", "show", &thread]).await;
    assert!(shown.stdout.contains("    why: "), "{shown:?}");

    // A successful answer turned into a failure by the host (an invalid session id) is not quoted as the agent's
    // reason: the host's detail is.
    let out = host
        .run(&["chat", "--agent", "badid", "--json", "hi"])
        .await;
    let record = out.json();
    assert_eq!(record["error"]["code"], "invalid_session_id", "{record}");
    assert!(
        !record["error"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("echo: hi"),
        "{record}"
    );
    let thread = record["thread_id"].as_str().unwrap().to_owned();
    let detail = host.thread(&thread).await;
    let reason = detail["runs"][0]["error"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("session id outside"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_attachment_over_the_agents_session_limit_fails_the_turn_and_is_not_lost_silently() {
    // The bundled agent keeps at most 4 MiB of history per session: a 5 MB prompt cannot be stored or sent.
    let host = Host::new();
    let big = host.path("a5m.txt");
    std::fs::write(&big, "lorem ipsum\n".repeat(5_000_000 / 12)).unwrap();
    let out = host
        .run(&[
            "chat",
            "--json",
            "--attach",
            big.to_str().unwrap(),
            "summarize",
        ])
        .await;
    assert_eq!(out.code, 6, "{}", out.stderr);
    let record = out.json();
    assert_eq!(record["error"]["code"], "agent_error", "{record}");
    assert_eq!(record["error"]["detail"], "message_too_large", "{record}");
    let reason = record["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("4194304 bytes"),
        "the reason names the limit: {record}"
    );
    // The refused message is not in the agent's session: the next turn is its first.
    let thread = record["thread_id"].as_str().unwrap().to_owned();
    let next = host.run(&["chat", "--thread", &thread, "hi"]).await;
    assert_eq!(next.code, 0, "{next:?}");
    assert_eq!(next.stdout, "You said: hi (turn 1 of this session)\n");
}
