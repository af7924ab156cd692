//! `awp-host agents list`: every source, validation errors shown per entry.

mod support;

use support::Host;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_list_shows_each_entry_and_why_it_is_unusable() {
    let host = Host::new();
    host.agents_toml(
        "default = \"fx\"\n\
         [[agents]]\nname = \"fx\"\nprotocol = \"stream-json\"\nexecutable = \"$FIXTURE\"\nmodel = \"m1\"\n\
         [[agents]]\nname = \"broken\"\nprotocol = \"awp-jsonl\"\nexecutable = \"relative/path\"\n\
         [[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"$FIXTURE\"\n",
    );
    let out = host.run(&["agents", "list", "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let list = out.json();
    let rows: Vec<(String, bool, bool, Option<String>)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_owned(),
                a["default"].as_bool().unwrap(),
                a["usable"].as_bool().unwrap(),
                a["error"]["code"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("fx".into(), true, true, None),
            (
                "broken".into(),
                false,
                false,
                Some("executable_not_absolute".into())
            ),
            ("acp".into(), false, true, None),
            ("awp-agent".into(), false, true, None),
        ]
    );
    assert_eq!(list[0]["model"], "m1");
    assert_eq!(list[0]["protocol"], "stream-json");
    let text = host.run(&["agents", "list"]).await;
    assert!(
        text.stdout.contains(
            "unusable: agents.toml:10:14: executable must be an absolute path: relative/path (executable_not_absolute)"
        ),
        "{text:?}"
    );
    assert_eq!(
        (&list[1]["line"], &list[1]["column"]),
        (&10.into(), &14.into())
    );
    assert!(text.stdout.contains("* fx"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_file_is_a_usage_error() {
    let host = Host::new();
    host.agents_toml("[[agents]\n");
    let out = host.run(&["agents", "list"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("(config_invalid)"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_toml_errors_give_line_and_column() {
    let host = Host::new();
    // A syntax error: the value on line 3 is not TOML.
    host.agents_toml("[[agents]]\nname = \"fx\"\nprotocol = awp\n");
    for args in [&["agents", "list"][..], &["chat", "hi"][..]] {
        let out = host.run(args).await;
        assert_eq!(out.code, 2, "{out:?}");
        assert!(
            out.stderr.contains("agents.toml:3:12: invalid: "),
            "{out:?}"
        );
        assert!(out.stderr.contains("(config_invalid)"), "{out:?}");
    }
    // A bad field of an entry: where its value is, in `agents list` and when chat picks it.
    host.agents_toml(
        "default = \"fx\"\n\n[[agents]]\nname = \"fx\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\n\
         \n[[agents]]\nname = \"bad\"\nprotocol = \"nope\"\nexecutable = \"$FIXTURE\"\n\
         \n[[agents]]\nname = \"typed\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\n\
         first_output_timeout_secs = \"x\"\n",
    );
    let out = host.run(&["chat", "--agent", "bad", "hi"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr
            .contains("agent `bad` (agents.toml:10:12) is unusable: unknown protocol"),
        "{out:?}"
    );
    // A value of the wrong type: toml's position of that value, not the entry's start (line 13).
    let out = host.run(&["chat", "--agent", "typed", "hi"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr
            .contains("agent `typed` (agents.toml:17:29) is unusable: invalid entry"),
        "{out:?}"
    );
    let list = host.run(&["agents", "list", "--json"]).await.json();
    let typed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "typed")
        .unwrap();
    assert_eq!((&typed["line"], &typed["column"]), (&17.into(), &29.into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_executable_is_resolved_once_and_both_are_shown() {
    let host = Host::new();
    let link = host.path("agent-link");
    std::os::unix::fs::symlink(support::fixture(), &link).unwrap();
    let fixture = std::fs::canonicalize(support::fixture()).unwrap();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"linked\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\n\
         [[agents]]\nname = \"dangling\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\n",
        link.display(),
        host.path("dangling-link").display(),
    ));
    std::os::unix::fs::symlink(host.path("nowhere"), host.path("dangling-link")).unwrap();
    let out = host.run(&["agents", "list", "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let list = out.json();
    assert_eq!(list[0]["executable"], link.display().to_string());
    assert_eq!(
        list[0]["resolved_executable"],
        fixture.display().to_string()
    );
    assert_eq!(list[0]["usable"], true, "{list}");
    assert_eq!(list[1]["usable"], false, "{list}");
    assert_eq!(list[1]["error"]["code"], "executable_not_found", "{list}");
    let text = host.run(&["agents", "list"]).await;
    assert!(
        text.stdout
            .contains(&format!("{} -> {}", link.display(), fixture.display())),
        "{text:?}"
    );
    // The resolved file is what runs.
    let chat = host
        .run(&["chat", "--agent", "linked", "--json", "hi"])
        .await;
    assert_eq!(chat.code, 0, "{chat:?}");
    assert_eq!(chat.json()["text"], "echo: hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_entry_with_the_bundled_agents_name_is_not_the_default() {
    let host = Host::new();
    host.agents_toml(
        "[[agents]]\nname = \"awp-agent\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\n",
    );
    let list = host.run(&["agents", "list", "--json"]).await.json();
    let defaults: Vec<(&str, &str, bool)> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["default"] == true)
        .map(|a| {
            (
                a["name"].as_str().unwrap(),
                a["source"].as_str().unwrap(),
                a["usable"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(defaults, [("awp-agent", "bundled", true)], "{list}");
    let text = host.run(&["agents", "list"]).await;
    let starred: Vec<&str> = text
        .stdout
        .lines()
        .filter(|l| l.starts_with("* "))
        .collect();
    assert_eq!(starred.len(), 1, "{text:?}");
    assert!(
        starred[0].contains("usable") && !starred[0].contains("unusable"),
        "{text:?}"
    );
    // The bundled agent still answers under its name.
    let out = host.run(&["chat", "--agent", "awp-agent", "hi"]).await;
    assert_eq!(out.code, 0, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_default_and_a_missing_executable_say_where_and_which_file() {
    let host = Host::new();
    host.agents_toml("default = \"nope\"\n");
    for args in [&["agents", "list"][..], &["chat", "hi"][..]] {
        let out = host.run(args).await;
        assert_eq!(out.code, 2, "{out:?}");
        assert!(
            out.stderr.contains(
                "agents.toml:1:11: default agent `nope` is not configured (default_agent_unknown)"
            ),
            "{out:?}"
        );
    }
    host.agents_toml(
        "[[agents]]\nname = \"bad\"\nprotocol = \"awp-jsonl\"\nexecutable = \"/nonexistent/agent-x\"\n",
    );
    let out = host.run(&["chat", "--agent", "bad", "hi"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.contains(
            "agent `bad` (agents.toml:4:14) is unusable: executable names a file that does not exist: \
             /nonexistent/agent-x"
        ),
        "{out:?}"
    );
}
