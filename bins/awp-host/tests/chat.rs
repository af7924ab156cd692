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
