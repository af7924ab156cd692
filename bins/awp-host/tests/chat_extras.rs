//! `chat --system` and `chat --agent-arg` with the real binary and the fixture agent: what reaches the agent's
//! command line, and the typed refusals.

mod support;

use support::{Host, result_record};

/// The fixture's `argv` turn: the agent's arguments as it received them.
fn argv_of(out: &support::Output) -> Vec<String> {
    let text = result_record(out)["text"].as_str().map(str::to_owned);
    let text = text.unwrap_or_else(|| {
        out.jsonl()
            .iter()
            .filter_map(|e| e["text"].as_str().map(str::to_owned))
            .collect()
    });
    let json = text
        .split_once("argv=")
        .unwrap_or_else(|| panic!("no argv in {out:?}"))
        .1;
    serde_json::from_str(json.lines().next().expect("an argv line"))
        .unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_reaches_a_stream_json_agent_as_append_system_prompt() {
    let host = Host::new();
    host.fixture_agent("claude", "normal", "stream-json");
    let out = host
        .run(&[
            "chat",
            "--agent",
            "claude",
            "--system",
            "be terse",
            "--agent-arg",
            "--cost-usd",
            "--agent-arg",
            "0.5",
            "--json",
            "argv",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let value = out.json();
    let text = value["text"].as_str().unwrap();
    let argv: Vec<String> = serde_json::from_str(text.split_once("argv=").unwrap().1)
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    // Configured args, then the extra args in order, then the system prompt, then the protocol's own flags.
    let pos = |a: &str| {
        argv.iter()
            .position(|x| x == a)
            .unwrap_or_else(|| panic!("{a} in {argv:?}"))
    };
    assert_eq!(argv[..2], ["--mode", "normal"]);
    assert_eq!(
        argv[2..6],
        ["--cost-usd", "0.5", "--append-system-prompt", "be terse"]
    );
    assert!(pos("be terse") < pos("--output-format"), "{argv:?}");
    // The extra argument took effect: the fixture reported the cost it was given.
    assert_eq!(value["total_cost_usd"], 0.5);
    // A prompt that looks like a flag is passed as one `--append-system-prompt=…` argument.
    let out = host
        .run(&["chat", "--agent", "claude", "--system=-v", "--json", "argv"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let value = out.json();
    let text = value["text"].as_str().unwrap();
    assert!(text.contains("\"--append-system-prompt=-v\""), "{text}");
    // Such a prompt needs no `=`: the value after --system is taken as is.
    let spaced = host
        .run(&[
            "chat",
            "--agent",
            "claude",
            "--system",
            "-be terse",
            "--json",
            "argv",
        ])
        .await;
    assert_eq!(spaced.code, 0, "{spaced:?}");
    let text = spaced.json()["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains("\"--append-system-prompt=-be terse\""),
        "{text}"
    );
    // Not stored: the next turn of the thread runs without it.
    let thread = value["thread_id"].as_str().unwrap().to_owned();
    let next = host
        .run(&["chat", "--thread", &thread, "--json", "argv"])
        .await;
    assert_eq!(next.code, 0, "{next:?}");
    assert!(!next.stdout.contains("append-system-prompt"), "{next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_is_refused_for_agents_without_a_system_prompt_option() {
    let host = Host::new();
    host.fixture_agent("fx", "normal", "awp-jsonl");
    let out = host
        .run(&["chat", "--agent", "fx", "--system", "x", "--json", "hi"])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
    let error = &out.json()["error"];
    assert_eq!(error["code"], "system_prompt_unsupported");
    assert!(
        error["message"].as_str().unwrap().contains("--agent-arg"),
        "{out:?}"
    );
    // Nothing was recorded for the refused turn.
    let list = host.run(&["threads", "list", "--json"]).await.json();
    assert_eq!(list.as_array().unwrap().len(), 0);
    // --agent-arg works for every protocol.
    let out = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--agent-arg=--cost-usd=0.25",
            "--jsonl",
            "argv",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(argv_of(&out)[2], "--cost-usd=0.25");
    assert_eq!(result_record(&out)["total_cost_usd"], 0.25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_and_agent_args_are_bounded() {
    let host = Host::new();
    host.fixture_agent("claude", "normal", "stream-json");
    let at_limit = "s".repeat(64 * 1024);
    let out = host
        .run(&[
            "chat", "--agent", "claude", "--system", &at_limit, "--json", "hi",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let over = "s".repeat(64 * 1024 + 1);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--system".into(), over], "system_prompt_too_large"),
        (vec!["--system".into(), "  ".into()], "system_prompt_empty"),
        (
            vec!["--agent-arg".into(), "a".repeat(16 * 1024 + 1)],
            "agent_arg_invalid",
        ),
        (vec!["--agent-arg=".into()], "agent_arg_invalid"),
        (
            (0..65)
                .flat_map(|_| ["--agent-arg".to_owned(), "x".to_owned()])
                .collect(),
            "too_many_agent_args",
        ),
    ];
    for (extra, code) in cases {
        let mut args: Vec<&str> = vec!["chat", "--agent", "claude", "--json"];
        args.extend(extra.iter().map(String::as_str));
        args.push("hi");
        let out = host.run(&args).await;
        assert_eq!(out.code, 2, "{code}: {out:?}");
        assert_eq!(out.json()["error"]["code"], code);
    }
    // An extra argument with a remote URL follows the launch rules of configured ones.
    let out = host
        .run(&[
            "chat",
            "--agent",
            "claude",
            "--agent-arg",
            "https://example.com/x",
            "--json",
            "hi",
        ])
        .await;
    assert_eq!(out.code, 3, "{out:?}");
    let error = &out.json()["error"];
    assert_eq!(error["code"], "remote_url_not_allowed");
    // The hint names this agent's switch (agents.toml), not the environment agent's variable.
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("extra agent argument 0"), "{message}");
    assert!(
        message.contains("remote_api_opt_in = true on the agent in agents.toml"),
        "{message}"
    );
    assert!(!message.contains("AWP_AGENT"), "{message}");
    // Opted in there, the same URL is accepted.
    host.agents_toml(
        "[[agents]]\nname = \"remote\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"normal\"]\nremote_api_opt_in = true\n",
    );
    let out = host
        .run(&[
            "chat",
            "--agent",
            "remote",
            "--agent-arg=--mcp-config=https://example.com/x",
            "--jsonl",
            "argv",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(argv_of(&out)[2], "--mcp-config=https://example.com/x");
}
