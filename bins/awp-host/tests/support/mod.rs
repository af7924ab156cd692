//! Test harness: runs the real `awp-host` binary with temp data/config dirs against real agent binaries.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use agentwire_process::{Child, Command, StdoutItem};
use serde_json::Value;

/// Generous bound on any one host run; tests never rely on it for ordering.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// A finished `awp-host` run.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// The stdout parsed as JSON Lines.
    pub fn jsonl(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The stdout parsed as one JSON value.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

/// Temp data and config dirs for one test.
#[derive(Debug)]
pub struct Host {
    _dir: tempfile::TempDir,
    pub data: PathBuf,
    pub config: PathBuf,
}

/// Path of the scripted fixture agent.
pub fn fixture() -> PathBuf {
    agentwire_testkit::bin_path("awp-fixture")
}

impl Host {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let config = dir.path().join("config");
        std::fs::create_dir_all(&config).expect("config dir");
        Self {
            _dir: dir,
            data,
            config,
        }
    }

    /// Writes agents.toml; `$FIXTURE` is replaced by the fixture agent's path.
    pub fn agents_toml(&self, text: &str) {
        let text = text.replace("$FIXTURE", &fixture().display().to_string());
        std::fs::write(self.config.join("agents.toml"), text).expect("write agents.toml");
    }

    /// One fixture agent named `name` in `mode` speaking `protocol`.
    pub fn fixture_agent(&self, name: &str, mode: &str, protocol: &str) {
        self.agents_toml(&format!(
            "[[agents]]\nname = \"{name}\"\nprotocol = \"{protocol}\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"{mode}\"]\n"
        ));
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self._dir.path().join(name)
    }

    /// Starts `awp-host --data-dir … --config-dir … ARGS`.
    pub fn spawn(&self, args: &[&str]) -> Child {
        let mut cmd = Command::new(agentwire_testkit::bin_path("awp-host"));
        cmd.arg("--data-dir")
            .arg(&self.data)
            .arg("--config-dir")
            .arg(&self.config)
            .args(args)
            .inherit_os_env();
        cmd.spawn().expect("spawn awp-host")
    }

    /// Starts `awp-host … ARGS` with extra environment variables (stdin left open; collect with [`collect`]).
    pub fn spawn_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(agentwire_testkit::bin_path("awp-host"));
        cmd.arg("--data-dir")
            .arg(&self.data)
            .arg("--config-dir")
            .arg(&self.config)
            .args(args)
            .inherit_os_env()
            .envs(env.iter().copied());
        cmd.spawn().expect("spawn awp-host")
    }

    /// Runs `awp-host ARGS` to completion with `stdin` written then closed.
    pub async fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self.spawn(args);
        let input = child.stdin();
        let writer = async move {
            // The host may exit without reading stdin (usage errors); a broken pipe is then expected.
            let written = input.write_all(stdin).await;
            input.close().await;
            written
        };
        let (_, out) = tokio::join!(writer, collect(&mut child));
        out
    }

    /// Runs `awp-host ARGS` to completion in the working directory `dir` (stdin closed at once).
    pub async fn run_in(&self, dir: &std::path::Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(agentwire_testkit::bin_path("awp-host"));
        cmd.arg("--data-dir")
            .arg(&self.data)
            .arg("--config-dir")
            .arg(&self.config)
            .args(args)
            .current_dir(dir)
            .inherit_os_env();
        let mut child = cmd.spawn().expect("spawn awp-host");
        child.stdin().close().await;
        collect(&mut child).await
    }

    /// Runs `awp-host ARGS` to completion (stdin closed at once).
    pub async fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, b"").await
    }

    /// `threads show ID --json`.
    /// `deepchat ARGS` (the real binary) talking to this host's data dir, with the caller's `DEEPCHAT_*`
    /// variables removed so a developer's shell cannot change the output mode, timeout or token; `env` added.
    pub fn deepchat(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(agentwire_testkit::bin_path("deepchat"));
        cmd.args(args)
            .inherit_os_env()
            .env("AWP_HOST_DATA_DIR", &self.data)
            .env_remove("DEEPCHAT_E2E_USER_DATA_DIR")
            .env_remove("DEEPCHAT_CLI_AGENT_TOKEN")
            .env_remove("DEEPCHAT_CLI_OUTPUT")
            .env_remove("DEEPCHAT_CLI_TIMEOUT_MS")
            .envs(env.iter().copied());
        cmd
    }

    pub async fn thread(&self, id: &str) -> Value {
        let out = self.run(&["threads", "show", id, "--json"]).await;
        assert_eq!(out.code, 0, "{out:?}");
        out.json()
    }
}

/// Reads all of stdout, waits for the exit, returns everything.
pub async fn collect(child: &mut Child) -> Output {
    let mut stdout = child.take_stdout().expect("stdout");
    collect_from(child, &mut stdout).await
}

/// [`collect`] for a child whose stdout was already taken: reads the rest of `stdout`, waits for the exit.
pub async fn collect_from(child: &mut Child, stdout: &mut agentwire_process::Stdout) -> Output {
    let work = async {
        let mut bytes = Vec::new();
        while let Some(item) = stdout.next().await {
            if let StdoutItem::Bytes(b) = item {
                bytes.extend_from_slice(&b);
            }
        }
        let status = child.wait().await;
        // The exit does not mean stderr was read: wait for its collection to end (EOF or the drain window).
        child.stderr_tail().finished().await;
        (bytes, status)
    };
    let (bytes, status) = tokio::time::timeout(RUN_TIMEOUT, work)
        .await
        .expect("awp-host finished in time");
    let (tail, _) = child.stderr_tail().snapshot();
    Output {
        code: status.code_or_signal(),
        stdout: String::from_utf8(bytes).expect("utf-8 stdout"),
        stderr: String::from_utf8_lossy(&tail).into_owned(),
    }
}

/// Reads stdout until `needle` appeared; returns what was read so far (the rest stays in `stdout`).
pub async fn read_until(stdout: &mut agentwire_process::Stdout, needle: &str) -> String {
    let work = async {
        let mut bytes = Vec::new();
        while let Some(item) = stdout.next().await {
            if let StdoutItem::Bytes(b) = item {
                bytes.extend_from_slice(&b);
            }
            if String::from_utf8_lossy(&bytes).contains(needle) {
                break;
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    };
    tokio::time::timeout(RUN_TIMEOUT, work)
        .await
        .expect("output arrived in time")
}

/// The `result` record (last line) of a `--jsonl` run.
pub fn result_record(out: &Output) -> Value {
    out.jsonl()
        .pop()
        .unwrap_or_else(|| panic!("no output: {out:?}"))
}

/// Thread id of a `--jsonl`/`--json` run.
pub fn thread_id(out: &Output) -> String {
    let v = if out.stdout.lines().count() > 1 {
        result_record(out)
    } else {
        out.json()
    };
    v["thread_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no thread id: {out:?}"))
        .to_owned()
}
