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
        text.stdout
            .contains("unusable: executable must be an absolute path (executable_not_absolute)"),
        "{text:?}"
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
