//! Real Claude Code stream-json recordings (`fixtures/recordings/`, Claude Code 2.1.197) replayed through the host
//! by the fixture agent, and a long generated stream whose text must be persisted whole.

mod support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::Host;

fn recording(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/recordings")
        .join(name)
}

fn replay_agent(host: &Host, protocol: &str, file: &Path) {
    host.agents_toml(&format!(
        "[[agents]]\nname = \"rp\"\nprotocol = \"{protocol}\"\nexecutable = \"$FIXTURE\"\n\
         args = [\"--mode\", \"replay\", \"--replay-file\", \"{}\"]\n",
        file.display()
    ));
}

/// The `result` text of the first turn of a recording.
fn first_result_text(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("read recording");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "result")
        .and_then(|v| v["result"].as_str().map(str::to_owned))
        .expect("a result line with result text")
}

fn check(file: &str, expect_stdout: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let host = Host::new();
        replay_agent(&host, "stream-json", &recording(file));
        let out = host.run(&["chat", "--agent", "rp", "x"]).await;
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(out.stdout, expect_stdout, "{file}");
    });
}

#[test]
fn claude_single_turn_renders_its_text_once() {
    let text = first_result_text(&recording("claude-stream-json-single-turn.jsonl"));
    check("claude-stream-json-single-turn.jsonl", &format!("{text}\n"));
}

#[test]
fn claude_partial_messages_render_deltas_not_the_duplicate_message() {
    let text = first_result_text(&recording("claude-stream-json-partial-two-turns.jsonl"));
    check(
        "claude-stream-json-partial-two-turns.jsonl",
        &format!("{text}\n"),
    );
}

#[test]
fn claude_tool_use_renders_summary_lines_then_text() {
    check(
        "claude-stream-json-tool-use.jsonl",
        "⚙ Bash {\"command\":\"echo hi-from-tool\",\"description\":\"say hi\"}\n↳ hi-from-tool\ntool said: \"hi-from-tool\"\n",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_streamed_answer_is_persisted_whole() {
    let host = Host::new();
    let file = host.path("long.jsonl");
    let mut lines =
        String::from("{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"long-1\"}\n");
    let mut expect = String::new();
    for i in 0..3000 {
        let piece = format!("w{i} ");
        expect.push_str(&piece);
        writeln!(
            lines,
            "{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{piece}\"}}}}"
        )
        .unwrap();
    }
    lines.push_str("{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"session_id\":\"long-1\"}\n");
    std::fs::write(&file, lines).unwrap();
    replay_agent(&host, "awp-jsonl", &file);
    let out = host.run(&["chat", "--agent", "rp", "--json", "x"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let record = out.json();
    assert_eq!(record["text"], expect.as_str());
    let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
    assert!(expect.len() > 4096 * 3, "spans several flush batches");
    assert_eq!(detail["messages"][1]["content"], expect.as_str());
    assert_eq!(detail["messages"].as_array().unwrap().len(), 2);
}

/// The rendered and stored text of `claude-stream-json-partial-two-blocks.jsonl`: two text blocks of one
/// message and a second message, each kept apart by a blank line.
const TWO_BLOCKS_TEXT: &str = "First block.\n\nSecond block.\n\nAnother message.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_text_blocks_and_messages_are_separated_by_a_blank_line() {
    let host = Host::new();
    replay_agent(
        &host,
        "stream-json",
        &recording("claude-stream-json-partial-two-blocks.jsonl"),
    );
    let out = host.run(&["chat", "--agent", "rp", "x"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, format!("{TWO_BLOCKS_TEXT}\n"));
    let out = host.run(&["chat", "--agent", "rp", "--json", "x"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let record = out.json();
    assert_eq!(record["text"], TWO_BLOCKS_TEXT);
    let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
    assert_eq!(detail["messages"][1]["content"], TWO_BLOCKS_TEXT);
    assert_eq!(detail["messages"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_json_agents_stream_token_deltas_unless_partial_messages_are_off() {
    let host = Host::new();
    let file = recording("claude-stream-json-partial-two-blocks.jsonl");
    let deltas = |out: &support::Output| -> Vec<String> {
        out.jsonl()
            .iter()
            .filter(|e| e["type"] == "text_delta")
            .map(|e| e["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    // Default: launched with --include-partial-messages, so the fixture (like Claude Code) streams deltas.
    replay_agent(&host, "stream-json", &file);
    let out = host.run(&["chat", "--agent", "rp", "--jsonl", "x"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        deltas(&out),
        [
            "First ",
            "block.",
            "\n\nSecond ",
            "block.",
            "\n\nAnother ",
            "message."
        ]
    );
    // Turned off: only the complete messages come, still kept apart.
    host.agents_toml(&format!(
        "[[agents]]\nname = \"rp\"\nprotocol = \"stream-json\"\nexecutable = \"$FIXTURE\"\n\
         include_partial_messages = false\n\
         args = [\"--mode\", \"replay\", \"--replay-file\", \"{}\"]\n",
        file.display()
    ));
    let out = host.run(&["chat", "--agent", "rp", "--jsonl", "x"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        deltas(&out),
        ["First block.\n\nSecond block.", "\n\nAnother message."]
    );
    assert_eq!(out.jsonl().last().unwrap()["type"], "result");
}
