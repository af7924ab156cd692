//! Provider and model administration end to end: `awp-host serve` with the real `deepchat` binary, renderer
//! approvals through the approver socket, agent tokens, the loopback OpenAI-compatible test server, agents that
//! reference a host provider, and a planted API key searched for in every output and file.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwire_process::{Child, StdoutItem, StopPlan};
use agentwire_testkit::openai_server::{Failure, OpenAiTestServer};
use serde_json::{Value, json};
use support::{Host, Output, RUN_TIMEOUT, collect, read_until};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Planted API key: must appear nowhere but the credential file.
const PLANTED_KEY: &str = "sk-PLANTED-admin-key-6f1c2a";
/// Planted upstream secret (the test server's 500 body and header): must appear nowhere.
const UPSTREAM_SECRET: &str = "UPSTREAM-SECRET-9d7e";

type Lines = tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>;

/// A running `awp-host serve` with an approver connected to its approvals socket.
struct Serve {
    child: Child,
    stdout: agentwire_process::Stdout,
    approver: Option<(Lines, tokio::net::unix::OwnedWriteHalf)>,
}

async fn serve(host: &Host, with_approver: bool, env: &[(&str, &str)]) -> Serve {
    let socket = host.path("approver.sock");
    let socket_arg = socket.display().to_string();
    let mut args = vec!["serve", "--console", "off"];
    if with_approver {
        args.extend(["--approvals-socket", socket_arg.as_str()]);
    }
    let mut child = host.spawn_with_env(&args, env);
    let mut stdout = child.take_stdout().expect("stdout");
    let line = read_until(&mut stdout, "\n").await;
    assert!(line.contains("local control listening"), "{line}");
    let approver = if with_approver {
        let token = std::fs::read_to_string(format!("{socket_arg}.token")).expect("token");
        let stream = tokio::net::UnixStream::connect(&socket)
            .await
            .expect("connect");
        let (read, mut write) = stream.into_split();
        let hello = format!("{}\n", json!({"type": "hello", "token": token}));
        write.write_all(hello.as_bytes()).await.expect("hello");
        let mut lines = BufReader::new(read).lines();
        assert_eq!(next_line(&mut lines).await["type"], "ready");
        Some((lines, write))
    } else {
        None
    };
    Serve {
        child,
        stdout,
        approver,
    }
}

async fn next_line(lines: &mut Lines) -> Value {
    let line = tokio::time::timeout(RUN_TIMEOUT, lines.next_line())
        .await
        .expect("a line in time")
        .expect("read")
        .expect("not at EOF");
    serde_json::from_str(&line).expect("json line")
}

impl Serve {
    /// Waits for the next approval, checks its method, answers it; returns the approval line.
    async fn decide(&mut self, method: &str, allow: bool) -> Value {
        let (lines, write) = self.approver.as_mut().expect("approver");
        // Notices of earlier decisions (`resolved`, `closed`) come first.
        let approval = loop {
            let line = next_line(lines).await;
            if line["type"] == "approval" {
                break line;
            }
        };
        assert_eq!(approval["type"], "approval", "{approval}");
        assert_eq!(approval["method"], method, "{approval}");
        let decision = if allow { "allow" } else { "deny" };
        let resolve = format!(
            "{}\n",
            json!({"type": "resolve", "id": approval["id"], "decision": decision})
        );
        write.write_all(resolve.as_bytes()).await.expect("resolve");
        approval
    }

    /// SIGTERM and wait; returns the exit code, the rest of stdout and the stderr tail (the host's log).
    async fn stop(self) -> Output {
        let Serve {
            child, mut stdout, ..
        } = self;
        let plan = StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(Duration::from_secs(30));
        let read = async {
            let mut bytes = Vec::new();
            while let Some(item) = stdout.next().await {
                if let StdoutItem::Bytes(b) = item {
                    bytes.extend_from_slice(&b);
                }
            }
            bytes
        };
        let (outcome, bytes) =
            tokio::time::timeout(RUN_TIMEOUT, async { tokio::join!(child.stop(plan), read) })
                .await
                .expect("serve stops");
        child.stderr_tail().finished().await;
        let (tail, _) = child.stderr_tail().snapshot();
        Output {
            code: outcome.status.code_or_signal(),
            stdout: String::from_utf8_lossy(&bytes).into_owned(),
            stderr: String::from_utf8_lossy(&tail).into_owned(),
        }
    }
}

/// Runs `deepchat ARGS` with `stdin` written then closed; when `decision` is set, answers the approval of
/// `method` meanwhile.
async fn deepchat_full(
    host: &Host,
    serve: Option<&mut Serve>,
    args: &[&str],
    stdin: &[u8],
    env: &[(&str, &str)],
    decision: Option<(&str, bool)>,
) -> Output {
    let mut child = host.deepchat(args, env).spawn().expect("spawn deepchat");
    let input = child.stdin();
    let stdin = stdin.to_vec();
    let writer = async move {
        let _ = input.write_all(&stdin).await;
        input.close().await;
    };
    let approve = async {
        if let (Some(serve), Some((method, allow))) = (serve, decision) {
            serve.decide(method, allow).await;
        }
    };
    let (_, _, out) = tokio::join!(writer, approve, collect(&mut child));
    out
}

async fn deepchat(host: &Host, args: &[&str]) -> Output {
    deepchat_full(host, None, args, b"", &[], None).await
}

/// A mutation the approver allows.
async fn allowed(
    host: &Host,
    serve: &mut Serve,
    method: &str,
    args: &[&str],
    stdin: &[u8],
) -> Output {
    deepchat_full(host, Some(serve), args, stdin, &[], Some((method, true))).await
}

fn ok(out: &Output) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    let envelope = out.json();
    assert_eq!(envelope["ok"], true, "{out:?}");
    envelope["result"].clone()
}

fn failed(out: &Output, exit: i32, code: &str) -> Value {
    assert_eq!(out.code, exit, "{out:?}");
    let envelope = out.json();
    assert_eq!(envelope["ok"], false, "{out:?}");
    assert_eq!(envelope["error"]["code"], code, "{out:?}");
    envelope["error"].clone()
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() {
                out.push(path);
            }
        }
    }
    out
}

fn add_args<'a>(name: &'a str, url: &'a str) -> Vec<&'a str> {
    vec![
        "provider",
        "add",
        "--name",
        name,
        "--api-type",
        "openai",
        "--base-url",
        url,
        "--json",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_and_models_are_administered_with_approvals_and_the_key_appears_nowhere() {
    let upstream = OpenAiTestServer::start().await.expect("test server");
    let host = Host::new();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"llm\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\nprovider = \"local-llm\"\n",
        agentwire_testkit::bin_path("awp-agent").display()
    ));
    let mut server = serve(&host, true, &[("AWP_HOST_LOG", "debug")]).await;
    let mut outputs: Vec<Output> = Vec::new();

    // The built-in provider is always there, with its models and no key.
    let list = deepchat(&host, &["provider", "list", "--json"]).await;
    let providers = ok(&list)["providers"].clone();
    assert_eq!(providers[0]["id"], "builtin");
    assert_eq!(providers[0]["storedCredentialConfigured"], false);
    assert!(
        providers[0]["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "builtin-demo")
    );
    outputs.push(list);

    // Add: an execution-config change, approved by the renderer; the approval shows no secret.
    let base = upstream.base_url();
    let mut child = host
        .deepchat(&add_args("local-llm", &base), &[])
        .spawn()
        .expect("spawn");
    child.stdin().close().await;
    let approval = server.decide("providers.addPublic", true).await;
    // The renderer reviews what it approves (DeepChat's approvalDisplay): the base URL included.
    assert_eq!(approval["display"]["operation"], "providers.addPublic");
    assert_eq!(approval["display"]["effect"], "execution-config");
    assert_eq!(
        approval["display"]["summary"],
        json!({"name": "local-llm", "apiType": "openai", "baseUrl": base, "enabled": true})
    );
    let add = collect(&mut child).await;
    let provider = ok(&add)["provider"].clone();
    assert_eq!(provider["custom"], true);
    assert_eq!(provider["apiType"], "openai");
    let id = provider["id"].as_str().unwrap().to_owned();
    outputs.push(add);

    // The key comes from stdin (a trailing newline is dropped); the approval display names provider and action only.
    let mut child = host
        .deepchat(
            &[
                "provider",
                "set-credential",
                "--provider",
                &id,
                "--stdin",
                "--json",
            ],
            &[],
        )
        .spawn()
        .expect("spawn");
    let input = child.stdin();
    input
        .write_all(format!("{PLANTED_KEY}\n").as_bytes())
        .await
        .expect("stdin");
    input.close().await;
    let approval = server.decide("providers.setCredential", true).await;
    assert!(!approval.to_string().contains(PLANTED_KEY), "{approval}");
    let set = collect(&mut child).await;
    assert_eq!(ok(&set)["storedApiKeyConfigured"], true);
    outputs.push(set);

    // A model of a custom provider is added by enabling it; config get/set/reset.
    let enable = allowed(
        &host,
        &mut server,
        "models.setStatus",
        &[
            "model",
            "enable",
            "--provider",
            &id,
            "--model",
            "test-chat",
            "--json",
        ],
        b"",
    )
    .await;
    assert_eq!(ok(&enable)["enabled"], true);
    outputs.push(enable);
    // The runtime list is the stored models plus what the provider's catalog offers (disabled until enabled).
    let runtime = rpc(
        &client(&host),
        "models.listRuntime",
        json!({"providerId": id}),
    )
    .await
    .expect("listRuntime");
    let listed: Vec<(String, bool)> = runtime["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m["enabled"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("test-chat".to_owned(), true),
            ("test-image".to_owned(), false),
            ("test-speech".to_owned(), false),
            ("test-video".to_owned(), false),
        ]
    );
    let get = deepchat(
        &host,
        &[
            "model",
            "config-get",
            "--provider",
            &id,
            "--model",
            "test-chat",
            "--json",
        ],
    )
    .await;
    assert_eq!(ok(&get)["config"]["isUserDefined"], false);
    outputs.push(get);
    let config = br#"{"maxTokens":1234,"contextLength":32000,"vision":false,"functionCall":true,"reasoning":false,"type":"chat","temperature":0.3}"#;
    let set_config = allowed(
        &host,
        &mut server,
        "models.setPublicConfig",
        &[
            "model",
            "config-set",
            "--provider",
            &id,
            "--model",
            "test-chat",
            "--stdin",
            "--json",
        ],
        config,
    )
    .await;
    let stored = ok(&set_config)["config"].clone();
    assert_eq!(stored["maxTokens"], 1234);
    assert_eq!(stored["isUserDefined"], true);
    outputs.push(set_config);
    let runtime = deepchat(
        &host,
        &[
            "model",
            "config-get",
            "--provider",
            &id,
            "--model",
            "test-chat",
        ],
    )
    .await;
    assert_eq!(runtime.code, 0, "{runtime:?}");
    assert!(runtime.stdout.contains("maxTokens: 1234"), "{runtime:?}");
    outputs.push(runtime);

    // The list shows a stored key, never the key.
    let list = deepchat(&host, &["provider", "list", "--json"]).await;
    let listed = ok(&list)["providers"][1].clone();
    assert_eq!(listed["id"], id.as_str());
    assert_eq!(listed["storedCredentialConfigured"], true);
    assert_eq!(listed["models"][0]["id"], "test-chat");
    outputs.push(list);
    let text = deepchat(&host, &["provider", "list"]).await;
    assert!(text.stdout.contains("key=stored"), "{text:?}");
    outputs.push(text);

    // Connection test: the test server answers GET /v1/models with the key as bearer.
    let test = deepchat(&host, &["provider", "test", "--provider", &id, "--json"]).await;
    assert_eq!(ok(&test), json!({"isOk": true, "errorMsg": null}));
    outputs.push(test);
    let seen = upstream.requests();
    let models = seen
        .iter()
        .find(|r| r.path == "/v1/models")
        .expect("GET /v1/models");
    assert_eq!(
        models.authorization.as_deref(),
        Some(format!("Bearer {PLANTED_KEY}").as_str())
    );
    // A model to try must be one the provider lists: a listed one passes, another is not_found.
    let listed = agentwire_testkit::openai_server::MODEL_IDS[0];
    let test = deepchat(
        &host,
        &[
            "provider",
            "test",
            "--provider",
            &id,
            "--model",
            listed,
            "--json",
        ],
    )
    .await;
    assert_eq!(ok(&test)["isOk"], true);
    let test = deepchat(
        &host,
        &[
            "provider",
            "test",
            "--provider",
            &id,
            "--model",
            "nosuch",
            "--json",
        ],
    )
    .await;
    let error = failed(&test, 6, "not_found");
    assert_eq!(error["details"]["code"], "model_not_found");
    let test = deepchat(
        &host,
        &[
            "provider",
            "test",
            "--provider",
            "builtin",
            "--model",
            "builtin-nope",
            "--json",
        ],
    )
    .await;
    failed(&test, 6, "not_found");
    // A 500 carrying a planted secret is a fixed failure message.
    upstream.set_failure(Some(Failure::Status {
        status: 500,
        secret: UPSTREAM_SECRET.to_owned(),
    }));
    let test = deepchat(&host, &["provider", "test", "--provider", &id, "--json"]).await;
    assert_eq!(
        ok(&test),
        json!({"isOk": false, "errorMsg": "Provider connection failed"})
    );
    outputs.push(test);
    upstream.set_failure(None);

    // The agent referencing the provider gets URL, model and key at launch: the upstream sees the bearer key.
    let before = upstream.requests().len();
    let run = deepchat(
        &host,
        &[
            "agent",
            "run",
            "--agent",
            "llm",
            "--prompt",
            "hello provider",
            "--json",
        ],
    )
    .await;
    let run_id = ok(&run)["runId"].as_str().unwrap().to_owned();
    let thread = ok(&run)["sessionId"].as_str().unwrap().to_owned();
    outputs.push(run);
    let watch = deepchat(&host, &["run", "watch", "--run", &run_id, "--jsonl"]).await;
    assert_eq!(watch.code, 0, "{watch:?}");
    outputs.push(watch);
    let got = deepchat(&host, &["run", "get", "--run", &run_id, "--json"]).await;
    let snapshot = ok(&got);
    let answer = snapshot["messages"][1]["text"].as_str().unwrap().to_owned();
    assert!(answer.contains("Hello from the test server."), "{answer}");
    outputs.push(got);
    let shown = host.run(&["threads", "show", &thread, "--json"]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    outputs.push(shown);
    outputs.push(host.run(&["threads", "show", &thread]).await);
    outputs.push(deepchat(&host, &["thread", "show", "--thread", &thread, "--json"]).await);
    let chat = upstream
        .requests()
        .into_iter()
        .skip(before)
        .find(|r| r.path == "/v1/chat/completions")
        .expect("the agent called the provider");
    assert_eq!(
        chat.authorization.as_deref(),
        Some(format!("Bearer {PLANTED_KEY}").as_str())
    );
    let body: Value = serde_json::from_slice(&chat.body).expect("json body");
    assert_eq!(body["model"], "test-chat");
    for args in [
        vec!["thread", "list", "--json"],
        vec!["approval", "list", "--json"],
        vec!["system", "capabilities", "--json"],
    ] {
        outputs.push(deepchat(&host, &args).await);
    }
    let agents = host.run(&["agents", "list", "--json"]).await;
    assert_eq!(agents.json()[0]["provider"], "local-llm", "{agents:?}");
    outputs.push(agents);
    let agents = host.run(&["agents", "list"]).await;
    assert!(agents.stdout.contains("(provider local-llm)"), "{agents:?}");
    outputs.push(agents);
    outputs.push(host.run(&["threads", "list", "--json"]).await);
    // `check --agent` launches the agent as `chat` does: with the provider's URL, model and key.
    let before = upstream.requests().len();
    let check = host.run(&["check", "--agent", "llm", "--json"]).await;
    assert_eq!(check.code, 0, "{check:?}");
    assert!(
        upstream
            .requests()
            .iter()
            .skip(before)
            .any(|r| r.authorization.as_deref() == Some(format!("Bearer {PLANTED_KEY}").as_str())),
        "the checked agent used the provider's key"
    );
    outputs.push(check);

    // Updates: a rename is no endpoint change; a new base URL is (agents launched earlier keep the old one).
    let rename = allowed(
        &host,
        &mut server,
        "providers.updatePublic",
        &[
            "provider",
            "update",
            "--provider",
            &id,
            "--name",
            "local-llm-2",
            "--json",
        ],
        b"",
    )
    .await;
    let renamed = ok(&rename);
    assert_eq!(renamed["provider"]["name"], "local-llm-2");
    assert_eq!(renamed["provider"]["storedCredentialConfigured"], true);
    assert_eq!(renamed["requiresRebuild"], false);
    outputs.push(rename);
    let moved = allowed(
        &host,
        &mut server,
        "providers.updatePublic",
        &[
            "provider",
            "update",
            "--provider",
            &id,
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--enabled",
            "false",
            "--json",
        ],
        b"",
    )
    .await;
    let moved_result = ok(&moved);
    assert_eq!(moved_result["requiresRebuild"], true);
    assert_eq!(moved_result["provider"]["enabled"], false);
    outputs.push(moved);
    // A disabled provider fails its connection test without calling anything.
    let test = deepchat(&host, &["provider", "test", "--provider", &id, "--json"]).await;
    assert_eq!(ok(&test)["isOk"], false);
    outputs.push(test);
    let disable = allowed(
        &host,
        &mut server,
        "models.setStatus",
        &[
            "model",
            "disable",
            "--provider",
            &id,
            "--model",
            "test-chat",
        ],
        b"",
    )
    .await;
    assert_eq!(disable.code, 0, "{disable:?}");
    assert!(
        disable.stdout.contains("test-chat: disabled"),
        "{disable:?}"
    );
    outputs.push(disable);
    let list = deepchat(&host, &["provider", "list", "--enabled-only", "--json"]).await;
    let enabled_only = ok(&list)["providers"].clone();
    assert_eq!(
        enabled_only.as_array().map(Vec::len),
        Some(1),
        "{enabled_only}"
    );
    outputs.push(list);

    // A destructive removal the renderer denies changes nothing (exit 5); approved, it removes models and key.
    let denied = deepchat_full(
        &host,
        Some(&mut server),
        &["provider", "remove", "--provider", &id, "--json"],
        b"",
        &[],
        Some(("providers.remove", false)),
    )
    .await;
    failed(&denied, 5, "approval_denied");
    outputs.push(denied);
    let clear = allowed(
        &host,
        &mut server,
        "providers.setCredential",
        &["provider", "clear-credential", "--provider", &id, "--json"],
        b"",
    )
    .await;
    assert_eq!(ok(&clear)["storedApiKeyConfigured"], false);
    outputs.push(clear);
    let reset = allowed(
        &host,
        &mut server,
        "models.resetConfig",
        &[
            "model",
            "config-reset",
            "--provider",
            &id,
            "--model",
            "test-chat",
            "--json",
        ],
        b"",
    )
    .await;
    assert_eq!(ok(&reset), json!({"reset": true}));
    outputs.push(reset);
    let remove = allowed(
        &host,
        &mut server,
        "providers.remove",
        &["provider", "remove", "--provider", &id, "--json"],
        b"",
    )
    .await;
    assert_eq!(ok(&remove), json!({"removed": true}));
    outputs.push(remove);
    let gone = deepchat(
        &host,
        &[
            "model",
            "config-get",
            "--provider",
            &id,
            "--model",
            "test-chat",
            "--json",
        ],
    )
    .await;
    failed(&gone, 6, "not_found");
    outputs.push(gone);

    let stopped = server.stop().await;
    outputs.push(stopped);

    // The planted key and the upstream secret appear in no output (stdout/stderr of every command, the host's
    // debug log) and in no file of the data directory (store, WAL, audit log, spool, settings) except the
    // credential file, which no longer holds it either after clear-credential.
    for out in &outputs {
        for secret in [PLANTED_KEY, UPSTREAM_SECRET] {
            assert!(
                !out.stdout.contains(secret) && !out.stderr.contains(secret),
                "{secret} leaked: {out:?}"
            );
        }
    }
    let all = files(&host.data);
    assert!(
        all.iter().any(|p| p.ends_with("awp-host.sqlite3")),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|p| p.to_string_lossy().contains("/local-control/audit")),
        "{all:?}"
    );
    for path in all {
        let bytes = std::fs::read(&path).expect("read");
        for secret in [PLANTED_KEY, UPSTREAM_SECRET] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} found in {}",
                path.display()
            );
        }
    }
}

/// A human client of the running serve (for calls the CLI refuses before sending, and for agent tokens).
fn client(host: &Host) -> agentwire_local_control::client::Client {
    let descriptor = agentwire_local_control::descriptor::discover(&host.data).expect("descriptor");
    agentwire_local_control::client::Client::from_descriptor(&descriptor, descriptor.token.clone())
        .expect("client")
}

async fn rpc(
    client: &agentwire_local_control::client::Client,
    method: &str,
    params: Value,
) -> Result<Value, agentwire_local_control::envelope::ErrorBody> {
    let envelope = agentwire_local_control::envelope::RequestEnvelope::new("req-1", method, params);
    match client.rpc(&envelope, RUN_TIMEOUT).await {
        Ok(value) => Ok(value),
        Err(agentwire_local_control::client::ClientError::Remote { error, .. }) => Err(error),
        Err(other) => panic!("transport failure: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_tokens_read_providers_and_models_and_every_mutation_is_refused() {
    let host = Host::new();
    host.agents_toml("");
    let mut server = serve(&host, true, &[]).await;
    let add = allowed(
        &host,
        &mut server,
        "providers.addPublic",
        &add_args("local", "http://127.0.0.1:9/v1"),
        b"",
    )
    .await;
    let id = ok(&add)["provider"]["id"].as_str().unwrap().to_owned();
    let human = client(&host);
    let issued = rpc(
        &human,
        "agentTokens.issue",
        json!({"conversationId": "th_x"}),
    )
    .await
    .expect("agent token");
    let token = issued["token"].as_str().unwrap().to_owned();
    let scopes = issued["scopes"].to_string();
    assert!(
        scopes.contains("providers:read") && scopes.contains("models:read"),
        "{scopes}"
    );
    assert!(
        !scopes.contains("providers:write") && !scopes.contains("providers:credential"),
        "{scopes}"
    );
    let agent = [("DEEPCHAT_CLI_AGENT_TOKEN", token.as_str())];

    // Reads are allowed.
    let list = deepchat_full(
        &host,
        None,
        &["provider", "list", "--json"],
        b"",
        &agent,
        None,
    )
    .await;
    assert_eq!(ok(&list)["providers"].as_array().unwrap().len(), 2);
    let config = deepchat_full(
        &host,
        None,
        &[
            "model",
            "config-get",
            "--provider",
            "builtin",
            "--model",
            "builtin-demo",
            "--json",
        ],
        b"",
        &agent,
        None,
    )
    .await;
    assert_eq!(ok(&config)["config"]["type"], "chat");
    let runtime = rpc_as(
        &host,
        &token,
        "models.listRuntime",
        json!({"providerId": "builtin"}),
    )
    .await;
    assert!(
        runtime.expect("listRuntime")["models"]
            .as_array()
            .unwrap()
            .len()
            >= 5
    );

    // Every mutation is refused before any approval is asked for (the approver sees nothing), and the
    // connection test (compute that reaches a provider) is human-only.
    let refused: Vec<Vec<&str>> = vec![
        add_args("agent-added", "http://127.0.0.1:9/v1"),
        vec![
            "provider",
            "update",
            "--provider",
            &id,
            "--enabled",
            "false",
            "--json",
        ],
        vec!["provider", "clear-credential", "--provider", &id, "--json"],
        vec!["provider", "remove", "--provider", &id, "--json"],
        vec!["provider", "test", "--provider", &id, "--json"],
        vec![
            "model",
            "enable",
            "--provider",
            &id,
            "--model",
            "m",
            "--json",
        ],
        vec![
            "model",
            "disable",
            "--provider",
            "builtin",
            "--model",
            "builtin-demo",
            "--json",
        ],
        vec![
            "model",
            "config-reset",
            "--provider",
            "builtin",
            "--model",
            "builtin-demo",
            "--json",
        ],
    ];
    for args in &refused {
        let out = deepchat_full(&host, None, args, b"", &agent, None).await;
        failed(&out, 4, "permission_denied");
    }
    let key = deepchat_full(
        &host,
        None,
        &[
            "provider",
            "set-credential",
            "--provider",
            &id,
            "--stdin",
            "--json",
        ],
        b"sk-agent-key\n",
        &agent,
        None,
    )
    .await;
    failed(&key, 4, "permission_denied");
    let set = deepchat_full(
        &host,
        None,
        &["model", "config-set", "--provider", "builtin", "--model", "builtin-demo", "--stdin", "--json"],
        br#"{"maxTokens":1,"contextLength":1,"vision":false,"functionCall":false,"reasoning":false,"type":"chat"}"#,
        &agent,
        None,
    )
    .await;
    failed(&set, 4, "permission_denied");
    let pending = deepchat(&host, &["approval", "list", "--json"]).await;
    assert_eq!(ok(&pending)["approvals"], json!([]));
    let after = deepchat(&host, &["provider", "list", "--json"]).await;
    let providers = ok(&after)["providers"].clone();
    assert_eq!(providers.as_array().unwrap().len(), 2);
    assert_eq!(providers[1]["enabled"], true);
    assert_eq!(server.stop().await.code, 0);
}

/// `method` called with an agent token.
async fn rpc_as(
    host: &Host,
    token: &str,
    method: &str,
    params: Value,
) -> Result<Value, agentwire_local_control::envelope::ErrorBody> {
    let descriptor = agentwire_local_control::descriptor::discover(&host.data).expect("descriptor");
    let client = agentwire_local_control::client::Client::from_descriptor(
        &descriptor,
        agentwire_local_control::descriptor::Token::parse(token).expect("token shape"),
    )
    .expect("client");
    rpc(&client, method, params).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_renderer_every_provider_mutation_fails_closed_at_once() {
    let host = Host::new();
    host.agents_toml("");
    let server = serve(&host, false, &[]).await;
    for args in [
        add_args("x", "http://127.0.0.1:9/v1"),
        vec!["provider", "remove", "--provider", "nope", "--json"],
        vec![
            "model",
            "disable",
            "--provider",
            "builtin",
            "--model",
            "builtin-demo",
            "--json",
        ],
    ] {
        let out = deepchat(&host, &args).await;
        failed(&out, 5, "approval_denied");
    }
    // Reads need no renderer.
    let list = deepchat(&host, &["provider", "list", "--json"]).await;
    assert_eq!(ok(&list)["providers"].as_array().unwrap().len(), 1);
    let test = deepchat(
        &host,
        &["provider", "test", "--provider", "builtin", "--json"],
    )
    .await;
    assert_eq!(ok(&test)["isOk"], true);
    let unknown = deepchat(&host, &["provider", "test", "--provider", "nope", "--json"]).await;
    failed(&unknown, 6, "not_found");
    assert_eq!(server.stop().await.code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_refused_with_typed_errors_at_each_limit() {
    let host = Host::new();
    host.agents_toml("");
    let mut server = serve(&host, true, &[]).await;
    let human = client(&host);

    // Names: 256 characters pass, 257 are refused by the CLI before anything is sent.
    let at = "n".repeat(256);
    let past = "n".repeat(257);
    let add = allowed(
        &host,
        &mut server,
        "providers.addPublic",
        &add_args(&at, "http://127.0.0.1:9/v1"),
        b"",
    )
    .await;
    let id = ok(&add)["provider"]["id"].as_str().unwrap().to_owned();
    failed(
        &deepchat(&host, &add_args(&past, "http://127.0.0.1:9/v1")).await,
        2,
        "invalid_request",
    );

    // Mutations certain to fail on the stored state fail before an approval is asked for: the approver is
    // attached and answers nothing here, so each of these would wait for a decision if one were asked.
    let taken = deepchat(&host, &add_args(&at, "http://127.0.0.1:9/v1")).await;
    assert_eq!(
        failed(&taken, 6, "conflict")["details"]["code"],
        "provider_name_taken"
    );
    let certain_failures: Vec<(Vec<&str>, i32, &str, &str)> = vec![
        (
            vec![
                "provider",
                "update",
                "--provider",
                "builtin",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--json",
            ],
            6,
            "conflict",
            "builtin_provider_immutable",
        ),
        (
            vec![
                "provider",
                "update",
                "--provider",
                "builtin",
                "--name",
                &at,
                "--json",
            ],
            6,
            "conflict",
            "provider_name_taken",
        ),
        (
            vec![
                "provider",
                "update",
                "--provider",
                "nonexist",
                "--enabled",
                "false",
                "--json",
            ],
            6,
            "not_found",
            "provider_not_found",
        ),
        (
            vec!["provider", "remove", "--provider", "builtin", "--json"],
            6,
            "conflict",
            "builtin_provider_immutable",
        ),
        (
            vec![
                "model",
                "enable",
                "--provider",
                "builtin",
                "--model",
                "builtin-nope",
                "--json",
            ],
            6,
            "not_found",
            "model_not_found",
        ),
        (
            vec![
                "model",
                "config-reset",
                "--provider",
                &id,
                "--model",
                "nope",
                "--json",
            ],
            6,
            "not_found",
            "model_not_found",
        ),
    ];
    for (args, exit, code, detail) in certain_failures {
        let out = deepchat(&host, &args).await;
        let error = failed(&out, exit, code);
        assert_eq!(error["details"]["code"], detail, "{args:?}: {out:?}");
    }
    let builtin_key = deepchat_full(
        &host,
        None,
        &[
            "provider",
            "set-credential",
            "--provider",
            "builtin",
            "--stdin",
            "--json",
        ],
        b"sk-x",
        &[],
        None,
    )
    .await;
    failed(&builtin_key, 6, "conflict");
    // They are audited as refused by the host (`denied`), never as a person's decision.
    let audit = files(&host.data)
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("audit"))
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect::<String>();
    assert!(!audit.contains("approval-denied"), "{audit}");
    assert!(
        audit.matches("\"outcome\":\"denied\"").count() >= 8,
        "{audit}"
    );

    // URLs carrying credentials, queries or fragments, and other schemes, never leave the CLI; on the socket
    // they are invalid_request before an approval is asked for (the renderer never sees them).
    for url in [
        "https://user:secret@api.example.com/v1",
        "https://api.example.com/v1?key=sk-1",
        "https://api.example.com/v1#x",
        "ftp://api.example.com",
    ] {
        failed(
            &deepchat(&host, &add_args("u", url)).await,
            2,
            "invalid_request",
        );
        let params = json!({"name": "u", "apiType": "openai", "baseUrl": url});
        let answer = rpc(&human, "providers.addPublic", params).await;
        assert_eq!(answer.expect_err(url).code.as_str(), "invalid_request");
    }
    // Plain http to a remote host would never be called by the provider runtime: refused by the host before an
    // approval is asked for.
    let remote = deepchat(&host, &add_args("r", "http://api.example.com/v1")).await;
    failed(&remote, 2, "invalid_request");
    // DeepChat adapters this host does not run.
    let mut anthropic = add_args("a", "https://api.example.com/v1");
    anthropic[5] = "anthropic";
    failed(&deepchat(&host, &anthropic).await, 2, "invalid_request");
    let mut unknown = add_args("a", "https://api.example.com/v1");
    unknown[5] = "vertex";
    failed(&deepchat(&host, &unknown).await, 2, "invalid_request");

    // Keys: the CLI reads at most 64 KiB of stdin (DeepChat's PROVIDER_CREDENTIAL_MAX_BYTES); the provider
    // runtime takes keys of at most 4096 bytes without whitespace. Each limit at its value and one past it.
    let set_key = |key: Vec<u8>| {
        let args = vec![
            "provider",
            "set-credential",
            "--provider",
            id.as_str(),
            "--stdin",
            "--json",
        ];
        (args, key)
    };
    let (args, key) = set_key(vec![b'k'; 4096]);
    let out = allowed(&host, &mut server, "providers.setCredential", &args, &key).await;
    assert_eq!(ok(&out)["storedApiKeyConfigured"], true);
    let (args, key) = set_key(vec![b'k'; 4097]);
    failed(
        &deepchat_full(&host, None, &args, &key, &[], None).await,
        2,
        "invalid_request",
    );
    let (args, key) = set_key(b"two words".to_vec());
    failed(
        &deepchat_full(&host, None, &args, &key, &[], None).await,
        2,
        "invalid_request",
    );
    let (args, key) = set_key(vec![b'k'; 64 * 1024 + 1]);
    failed(
        &deepchat_full(&host, None, &args, &key, &[], None).await,
        6,
        "body_too_large",
    );
    // Exactly 64 KiB is within DeepChat's contract and reaches the host, whose key rule (4096 bytes) refuses it.
    let (args, key) = set_key(vec![b'k'; 64 * 1024]);
    failed(
        &deepchat_full(&host, None, &args, &key, &[], None).await,
        2,
        "invalid_request",
    );
    let (args, key) = set_key(b"   \n".to_vec());
    failed(
        &deepchat_full(&host, None, &args, &key, &[], None).await,
        2,
        "invalid_request",
    );
    failed(
        &deepchat(
            &host,
            &["provider", "set-credential", "--provider", &id, "--json"],
        )
        .await,
        2,
        "invalid_request",
    );
    // The built-in provider takes no key.
    let (_, key) = set_key(b"sk-x".to_vec());
    let builtin = [
        "provider",
        "set-credential",
        "--provider",
        "builtin",
        "--stdin",
        "--json",
    ];
    // Certain to fail: refused before an approval is asked for.
    failed(
        &deepchat_full(&host, None, &builtin, &key, &[], None).await,
        6,
        "conflict",
    );

    // Model configuration: unknown fields are refused by the CLI and by the host.
    let config = json!({"maxTokens":10,"contextLength":10,"vision":false,"functionCall":false,"reasoning":false,"type":"chat"});
    let mut extra = config.clone();
    extra["apiKey"] = json!("sk-smuggled");
    let config_set = [
        "model",
        "config-set",
        "--provider",
        "builtin",
        "--model",
        "builtin-demo",
        "--stdin",
        "--json",
    ];
    failed(
        &deepchat_full(
            &host,
            None,
            &config_set,
            extra.to_string().as_bytes(),
            &[],
            None,
        )
        .await,
        2,
        "invalid_request",
    );
    let params = json!({"providerId": "builtin", "modelId": "builtin-demo", "config": extra});
    let answer = rpc(&human, "models.setPublicConfig", params).await;
    assert_eq!(
        answer.expect_err("unknown field").code.as_str(),
        "invalid_request"
    );
    // Route body limits (DeepChat's surface entries): 16 KiB for providers.addPublic, 64 KiB for
    // models.setPublicConfig, 128 KiB for providers.setCredential; a larger body is refused before it is parsed.
    for (method, params) in [
        (
            "providers.addPublic",
            json!({"name": "n".repeat(16 * 1024), "apiType": "openai", "baseUrl": "https://h"}),
        ),
        (
            "models.setPublicConfig",
            json!({"providerId": "builtin", "modelId": "builtin-demo", "config": {"x": "y".repeat(64 * 1024)}}),
        ),
        (
            "providers.setCredential",
            json!({"providerId": id, "action": "set", "kind": "api-key", "value": "k".repeat(128 * 1024)}),
        ),
    ] {
        let answer = rpc(&human, method, params).await;
        assert_eq!(
            answer.expect_err(method).code.as_str(),
            "body_too_large",
            "{method}"
        );
    }
    // None of the refused requests ever reached the renderer.
    let pending = deepchat(&host, &["approval", "list", "--json"]).await;
    assert_eq!(ok(&pending)["approvals"], json!([]));
    failed(
        &deepchat_full(&host, None, &config_set, b"[1]", &[], None).await,
        2,
        "invalid_request",
    );
    failed(
        &deepchat_full(&host, None, &config_set, b"{", &[], None).await,
        2,
        "invalid_request",
    );
    let ok_set = allowed(
        &host,
        &mut server,
        "models.setPublicConfig",
        &config_set,
        config.to_string().as_bytes(),
    )
    .await;
    assert_eq!(ok(&ok_set)["config"]["maxTokens"], 10);

    // Unknown providers and models are not_found; the built-in provider cannot be removed or get a URL.
    let missing = deepchat(
        &host,
        &[
            "model",
            "config-get",
            "--provider",
            "builtin",
            "--model",
            "nope",
            "--json",
        ],
    )
    .await;
    failed(&missing, 6, "not_found");
    let remove = deepchat(
        &host,
        &["provider", "remove", "--provider", "builtin", "--json"],
    )
    .await;
    assert_eq!(
        failed(&remove, 6, "conflict")["details"]["code"],
        "builtin_provider_immutable"
    );
    let url = deepchat(
        &host,
        &[
            "provider",
            "update",
            "--provider",
            "builtin",
            "--base-url",
            "https://api.example.com",
            "--json",
        ],
    )
    .await;
    failed(&url, 6, "conflict");
    failed(
        &deepchat(&host, &["provider", "update", "--provider", &id, "--json"]).await,
        2,
        "invalid_request",
    );
    assert_eq!(server.stop().await.code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_provider_cannot_be_used_does_not_start_and_records_no_run() {
    use agentwire_host::providers::{NewProvider, ProviderChange, ProviderRegistry};
    let host = Host::new();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"llm\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{0}\"\nprovider = \"local-llm\"\n\
         [[agents]]\nname = \"far\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{0}\"\nprovider = \"remote\"\n",
        agentwire_testkit::bin_path("awp-agent").display()
    ));
    // Unknown provider: neither `chat` nor `check` starts the agent.
    let out = host.run(&["chat", "--agent", "llm", "hello"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("provider_not_found"), "{out:?}");
    let out = host.run(&["check", "--agent", "llm"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("provider_not_found"), "{out:?}");
    // `agents list` does not call it usable, and a detached run through the control plane is the same
    // configuration error (exit 3, the registry's code in details.code), never internal_error.
    let list = host.run(&["agents", "list", "--json"]).await;
    assert_eq!(list.code, 0, "{list:?}");
    let entries = list.json();
    let llm = entries
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "llm"))
        .cloned()
        .expect("llm listed");
    assert_eq!(llm["usable"], false, "{llm}");
    assert_eq!(llm["error"]["code"], "provider_not_found", "{llm}");
    let text = host.run(&["agents", "list"]).await;
    assert!(
        text.stdout.contains("unusable: cannot use its provider"),
        "{text:?}"
    );
    let server = serve(&host, false, &[]).await;
    let run = deepchat(
        &host,
        &["agent", "run", "--agent", "llm", "--prompt", "hi", "--json"],
    )
    .await;
    let error = failed(&run, 3, "unavailable");
    assert_eq!(error["details"]["code"], "provider_not_found", "{error}");
    assert_eq!(server.stop().await.code, 0);
    let mut registry = ProviderRegistry::open(&host.data).expect("registry");
    let local = registry
        .add(NewProvider {
            name: "local-llm".to_owned(),
            api_type: agentwire_local_control::contract::providers::ApiType::Openai,
            base_url: "http://127.0.0.1:9/v1".to_owned(),
            enabled: true,
        })
        .expect("add");
    // No enabled model.
    let out = host.run(&["chat", "--agent", "llm", "hello"]).await;
    assert!(out.stderr.contains("no_enabled_model"), "{out:?}");
    registry
        .set_model_status(&local.id, "m1", true)
        .expect("model");
    registry
        .update(
            &local.id,
            ProviderChange {
                enabled: Some(false),
                ..ProviderChange::default()
            },
        )
        .expect("disable");
    let out = host.run(&["chat", "--agent", "llm", "hello"]).await;
    assert!(out.stderr.contains("provider_disabled"), "{out:?}");
    // A remote provider needs remote_api_opt_in on the agent.
    let remote = registry
        .add(NewProvider {
            name: "remote".to_owned(),
            api_type: agentwire_local_control::contract::providers::ApiType::Openai,
            base_url: "https://api.example.com/v1".to_owned(),
            enabled: true,
        })
        .expect("add");
    registry
        .set_model_status(&remote.id, "m1", true)
        .expect("model");
    let out = host.run(&["chat", "--agent", "far", "hello"]).await;
    assert!(out.stderr.contains("remote_url_not_allowed"), "{out:?}");
    drop(registry);
    let threads = host.run(&["threads", "list", "--json"]).await;
    assert_eq!(threads.code, 0, "{threads:?}");
    assert_eq!(
        threads.json().as_array().map(Vec::len),
        Some(0),
        "{threads:?}"
    );
    // An entry may not set the variables its provider fills.
    host.agents_toml(&format!(
        "[[agents]]\nname = \"both\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\nprovider = \"local-llm\"\n\
         env = {{ OPENAI_API_KEY = \"sk-x\" }}\n",
        agentwire_testkit::bin_path("awp-agent").display()
    ));
    let out = host.run(&["agents", "list", "--json"]).await;
    assert!(
        out.stdout
            .contains("provider and env.OPENAI_API_KEY conflict"),
        "{out:?}"
    );
}

/// One provider-reference rule for every method (id or name), and a model list filtered by an unknown provider
/// is not_found rather than an empty list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_takes_a_provider_by_id_or_name() {
    use agentwire_host::providers::{NewProvider, ProviderRegistry};
    let host = Host::new();
    host.agents_toml("");
    let mut registry = ProviderRegistry::open(&host.data).expect("registry");
    let local = registry
        .add(NewProvider {
            name: "local-llm".to_owned(),
            api_type: agentwire_local_control::contract::providers::ApiType::Openai,
            base_url: "http://127.0.0.1:9/v1".to_owned(),
            enabled: true,
        })
        .expect("add");
    registry
        .set_model_status(&local.id, "m1", true)
        .expect("model");
    drop(registry);
    let server = serve(&host, false, &[]).await;
    for reference in [local.id.as_str(), "local-llm"] {
        let list = deepchat(&host, &["model", "list", "--provider", reference, "--json"]).await;
        let models = ok(&list)["models"].clone();
        assert_eq!(models.as_array().map(Vec::len), Some(1), "{list:?}");
        assert_eq!(models[0]["providerId"], local.id.as_str());
        let config = deepchat(
            &host,
            &[
                "model",
                "config-get",
                "--provider",
                reference,
                "--model",
                "m1",
                "--json",
            ],
        )
        .await;
        assert_eq!(ok(&config)["config"]["type"], "chat", "{config:?}");
        let test = deepchat(
            &host,
            &["provider", "test", "--provider", reference, "--json"],
        )
        .await;
        assert_eq!(test.code, 0, "{test:?}");
    }
    let unknown = deepchat(
        &host,
        &["model", "list", "--provider", "nonexistent", "--json"],
    )
    .await;
    failed(&unknown, 6, "not_found");
    let text = deepchat(&host, &["model", "list", "--provider", "nonexistent"]).await;
    assert_eq!(text.code, 6, "{text:?}");
    assert!(text.stderr.starts_with("not_found"), "{text:?}");
    assert_eq!(server.stop().await.code, 0);
}
