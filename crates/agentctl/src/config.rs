//! agentctl's configuration: every `AGENTCTL_*` environment variable (also accepted as a `--flag`), with defaults.
//!
//! Source: `protocols/agentctl.md` ("Configuration"); the variables after `AGENTCTL_REQUEST_TIMEOUT_MS` are
//! agentwire's documented limits and are not in the Kandev document.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Default for [`Config::max_message_bytes`]: 64 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Upper bound of every duration setting, in milliseconds: 7 days (a larger value is refused at boot, exit 2).
pub const MAX_DURATION_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// Largest `AGENTCTL_TOKEN_FILE` agentctl reads, in bytes.
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// A secret setting (the token): `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self(text.to_owned()))
    }
}

/// agentctl: a sidecar that runs one JSON-RPC (ACP) agent subprocess and exposes it over HTTP + WebSocket.
///
/// Every option is read from its `AGENTCTL_*` environment variable; a command-line flag wins over the variable.
/// On start agentctl prints one line on stdout, `agentctl listening on HOST:PORT`, once it accepts connections
/// (with `AGENTCTL_PORT=0` the port is the one the OS chose). Logs go to stderr.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "agentctl",
    version,
    about = "agentctl: runs one ACP agent subprocess and exposes it over HTTP + WebSocket (a Kandev-compatible sidecar)",
    long_about = None,
    max_term_width = 120
)]
pub struct Config {
    /// HTTP port; 0 lets the OS choose (see the line printed on stdout).
    #[arg(long, env = "AGENTCTL_PORT", default_value_t = 9999)]
    pub port: u16,

    /// Listen address. Container images set 0.0.0.0 together with AGENTCTL_TOKEN.
    #[arg(long, env = "AGENTCTL_LISTEN_HOST", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub listen_host: IpAddr,

    /// Agent command line, split like a POSIX shell splits words (quotes honoured); never run through a shell.
    #[arg(long, env = "AGENTCTL_AGENT_COMMAND", default_value = "auggie --acp")]
    pub agent_command: String,

    /// The agent's working directory and the root `fs/*` requests are confined to [default: the current directory].
    #[arg(long, env = "AGENTCTL_WORKDIR")]
    pub workdir: Option<PathBuf>,

    /// Start the agent at boot (true/false).
    #[arg(long, env = "AGENTCTL_AUTO_START", default_value_t = false, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub auto_start: bool,

    /// Log level: trace, debug, info, warn or error (logs go to stderr).
    #[arg(long, env = "AGENTCTL_LOG_LEVEL", default_value = "info",
          value_parser = ["trace", "debug", "info", "warn", "error"])]
    pub log_level: String,

    /// Lines kept of the agent's stderr and of its non-JSON stdout, for /api/v1/output; older lines are dropped
    /// (and counted). 1 to 1000000.
    #[arg(long, env = "AGENTCTL_OUTPUT_BUFFER_SIZE", default_value_t = 1000,
          value_parser = usize_in::<1, 1_000_000>)]
    pub output_buffer_size: usize,

    /// When set, every endpoint but /health requires `Authorization: Bearer <token>`. Never passed to the agent.
    /// Note: any process of the same user (the agent too) can read agentctl's initial environment in
    /// /proc/<pid>/environ; prefer AGENTCTL_TOKEN_FILE.
    #[arg(long, env = "AGENTCTL_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,

    /// A file holding the token (one line; a final newline is ignored; at most 4096 bytes), read once at boot, so
    /// the token is never in agentctl's environment. Exclusive with AGENTCTL_TOKEN. The file stays readable to
    /// whoever can read it: remove it after start or keep it where the agent cannot read it.
    #[arg(long, env = "AGENTCTL_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,

    /// Answer session/request_permission with the first allow_once/allow_always option instead of relaying it
    /// (true/false).
    #[arg(long, env = "AGENTCTL_AUTO_APPROVE_PERMISSIONS", default_value_t = false, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub auto_approve_permissions: bool,

    /// Default wait of /api/v1/acp/call, in milliseconds; a call's `timeout_ms` overrides it. On expiry: 504.
    #[arg(long, env = "AGENTCTL_REQUEST_TIMEOUT_MS", default_value_t = 600_000,
          value_parser = u64_in::<1, MAX_DURATION_MS>)]
    pub request_timeout_ms: u64,

    /// How long a request from the agent (session/request_permission, …) waits for a subscriber's answer, in
    /// milliseconds; then agentctl answers it itself (cancelled outcome, or -32601).
    #[arg(long, env = "AGENTCTL_AGENT_REQUEST_TIMEOUT_MS", default_value_t = 600_000,
          value_parser = u64_in::<1, MAX_DURATION_MS>)]
    pub agent_request_timeout_ms: u64,

    /// Largest JSON-RPC message in either direction, in bytes (agent stdout line, HTTP body, WebSocket message).
    /// A longer agent line is discarded and reported in /api/v1/output; a longer HTTP body gets 413. 1 to 1 GiB.
    #[arg(long, env = "AGENTCTL_MAX_MESSAGE_BYTES", default_value_t = DEFAULT_MAX_MESSAGE_BYTES,
          value_parser = usize_in::<1, { 1 << 30 }>)]
    pub max_message_bytes: usize,

    /// Messages queued per /api/v1/acp/stream or /api/v1/output/stream subscriber; a subscriber that falls this
    /// far behind is disconnected with close code 1008 and a reason. 1 to 1048576.
    #[arg(long, env = "AGENTCTL_SUBSCRIBER_QUEUE", default_value_t = 4096,
          value_parser = usize_in::<1, 1_048_576>)]
    pub subscriber_queue: usize,

    /// Bytes queued per /api/v1/acp/stream subscriber (a message larger than this still passes when the queue is
    /// otherwise empty); over it, the subscriber is disconnected like a full queue. At least 1.
    #[arg(long, env = "AGENTCTL_SUBSCRIBER_QUEUE_BYTES", default_value_t = 256 * 1024 * 1024,
          value_parser = usize_in::<1, { usize::MAX }>)]
    pub subscriber_queue_bytes: usize,

    /// Largest number of WebSocket subscribers per stream; one more gets 503. 1 to 65536.
    #[arg(long, env = "AGENTCTL_MAX_SUBSCRIBERS", default_value_t = 64,
          value_parser = usize_in::<1, 65_536>)]
    pub max_subscribers: usize,

    /// Largest number of /api/v1/acp/call requests waiting for the agent at once; one more gets 503. 1 to 1048576.
    #[arg(long, env = "AGENTCTL_MAX_PENDING_CALLS", default_value_t = 1024,
          value_parser = usize_in::<1, 1_048_576>)]
    pub max_pending_calls: usize,

    /// Largest number of agent requests waiting for a subscriber's answer; one more is answered at once with
    /// JSON-RPC error -32603 (fail closed). 1 to 1048576.
    #[arg(long, env = "AGENTCTL_MAX_PENDING_AGENT_REQUESTS", default_value_t = 1024,
          value_parser = usize_in::<1, 1_048_576>)]
    pub max_pending_agent_requests: usize,

    /// Longest /api/v1/output line, in bytes: a longer stderr line is split into pieces of this size; a longer
    /// non-JSON stdout line is cut and ends with `… [N bytes cut]`. 1 to 16 MiB.
    #[arg(long, env = "AGENTCTL_MAX_OUTPUT_LINE_BYTES", default_value_t = 16 * 1024,
          value_parser = usize_in::<1, { 16 << 20 }>)]
    pub max_output_line_bytes: usize,

    /// Stop ladder: how long the agent gets to exit after its stdin is closed, in milliseconds, before SIGTERM
    /// goes to its process group (`force` skips this step). At most 7 days.
    #[arg(long, env = "AGENTCTL_STOP_GRACE_MS", default_value_t = 5_000,
          value_parser = u64_in::<0, MAX_DURATION_MS>)]
    pub stop_grace_ms: u64,

    /// Stop ladder: how long the agent's process group gets after SIGTERM, in milliseconds, before SIGKILL. At
    /// most 7 days.
    #[arg(long, env = "AGENTCTL_TERM_GRACE_MS", default_value_t = 3_000,
          value_parser = u64_in::<0, MAX_DURATION_MS>)]
    pub term_grace_ms: u64,

    /// Bytes queued for the agent's stdin (calls, sends, answers agentctl writes itself). A call or send that does
    /// not fit gets 503; an answer agentctl owes the agent (fs result, fail-closed answer) that does not fit is
    /// replaced by a small JSON-RPC error, and dropped (counted) when even that does not fit. A line of any size
    /// may wait when the queue is empty. At least 1.
    #[arg(long, env = "AGENTCTL_MAX_STDIN_QUEUE_BYTES", default_value_t = 2 * DEFAULT_MAX_MESSAGE_BYTES,
          value_parser = usize_in::<1, { usize::MAX }>)]
    pub max_stdin_queue_bytes: usize,

    /// How long a connection may take to deliver a complete request head, in milliseconds, counted from when
    /// agentctl starts waiting for one: bounds slow headers and idle keep-alive connections alike. Then the
    /// connection is closed. 1 to 7 days.
    #[arg(long, env = "AGENTCTL_HEADER_READ_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = u64_in::<1, MAX_DURATION_MS>)]
    pub header_read_timeout_ms: u64,

    /// The longest pause while a request body is being received, in milliseconds; then 408 and the connection is
    /// closed (a half-sent body cannot hold a connection). 1 to 7 days.
    #[arg(long, env = "AGENTCTL_IDLE_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = u64_in::<1, MAX_DURATION_MS>)]
    pub idle_timeout_ms: u64,

    /// The longest a whole request body may take to arrive, in milliseconds, counted from when its head was read;
    /// then 408 and the connection is closed (a body trickled a byte at a time cannot hold a connection). 1 to 7
    /// days.
    #[arg(long, env = "AGENTCTL_BODY_READ_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = u64_in::<1, MAX_DURATION_MS>)]
    pub body_read_timeout_ms: u64,

    /// Open HTTP connections at once (WebSockets included); one more is answered 503 and closed at once. 1 to
    /// 65536.
    #[arg(long, env = "AGENTCTL_MAX_CONNECTIONS", default_value_t = 512,
          value_parser = usize_in::<1, 65_536>)]
    pub max_connections: usize,

    /// The agent's environment. `inherit`: agentctl's whole environment minus every AGENTCTL_* variable (as
    /// Kandev's sidecar does: the container's environment is the agent's). `allowlist` (strict, opt-in): only PATH
    /// HOME USER LOGNAME SHELL LANG TERM TMPDIR TZ LC_* plus the names in AGENTCTL_AGENT_ENV. AGENTCTL_TOKEN and
    /// every other AGENTCTL_* variable are never passed in either mode.
    #[arg(long, env = "AGENTCTL_AGENT_ENV_MODE", value_enum, default_value_t = AgentEnvMode::Inherit)]
    pub agent_env_mode: AgentEnvMode,

    /// With AGENTCTL_AGENT_ENV_MODE=allowlist: comma-separated names of extra environment variables copied from
    /// agentctl's environment to the agent (API keys, …); AGENTCTL_* names are ignored. Unused in inherit mode.
    #[arg(
        long,
        env = "AGENTCTL_AGENT_ENV",
        default_value = "",
        value_delimiter = ','
    )]
    pub agent_env: Vec<String>,
}

/// How the agent's environment is built ([`Config::agent_env_mode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentEnvMode {
    /// agentctl's whole environment minus every `AGENTCTL_*` variable (the default; Kandev's sidecar does this).
    Inherit,
    /// The OS allowlist of `agentwire-process` plus the names in `AGENTCTL_AGENT_ENV` (strict; explicit opt-in).
    Allowlist,
}

/// Whether `name` is one of agentctl's own variables (`AGENTCTL_*`), never passed to the agent.
pub fn is_agentctl_variable(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b"AGENTCTL_")
}

impl Config {
    /// Reads `AGENTCTL_TOKEN_FILE` (once) into [`Config::token`]; a no-op without it.
    ///
    /// # Errors
    /// A message naming the variable when the file cannot be read, is larger than [`MAX_TOKEN_FILE_BYTES`], is
    /// not UTF-8, is empty or holds more than one line. The message never contains the file's content.
    pub fn load_token_file(&mut self) -> anyhow::Result<()> {
        let Some(path) = &self.token_file else {
            return Ok(());
        };
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| anyhow::anyhow!("AGENTCTL_TOKEN_FILE {shown}: {e}"))?;
        if !meta.is_file() {
            anyhow::bail!("AGENTCTL_TOKEN_FILE {shown}: not a regular file");
        }
        if meta.len() > MAX_TOKEN_FILE_BYTES {
            anyhow::bail!("AGENTCTL_TOKEN_FILE {shown}: larger than {MAX_TOKEN_FILE_BYTES} bytes");
        }
        let bytes =
            std::fs::read(path).map_err(|e| anyhow::anyhow!("AGENTCTL_TOKEN_FILE {shown}: {e}"))?;
        let Ok(text) = String::from_utf8(bytes) else {
            anyhow::bail!("AGENTCTL_TOKEN_FILE {shown}: not utf-8");
        };
        let token = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text);
        if token.is_empty() {
            anyhow::bail!("AGENTCTL_TOKEN_FILE {shown}: empty");
        }
        if token.contains(['\n', '\r']) {
            anyhow::bail!("AGENTCTL_TOKEN_FILE {shown}: more than one line");
        }
        self.token = Some(Secret(token.to_owned()));
        Ok(())
    }

    /// The token, from `AGENTCTL_TOKEN` or (after [`Config::load_token_file`]) `AGENTCTL_TOKEN_FILE`; `None` when
    /// unset or empty.
    pub fn token(&self) -> Option<&str> {
        self.token
            .as_ref()
            .map(Secret::expose)
            .filter(|t| !t.is_empty())
    }

    /// Checks what clap cannot: the agent command splits into words, the workdir (when set) is an existing
    /// directory, and a non-loopback listen address comes with
    /// a token.
    ///
    /// # Errors
    /// A message naming the variable at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Err(error) = self.agent_argv() {
            anyhow::bail!("AGENTCTL_AGENT_COMMAND: {error}");
        }
        if let Some(dir) = &self.workdir {
            match std::fs::metadata(dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => anyhow::bail!("AGENTCTL_WORKDIR {}: not a directory", dir.display()),
                Err(error) => anyhow::bail!("AGENTCTL_WORKDIR {}: {error}", dir.display()),
            }
        }
        if self.token_file.is_some() && self.token.is_none() {
            anyhow::bail!("AGENTCTL_TOKEN_FILE: not read yet (call load_token_file first)");
        }
        if !self.listen_host.is_loopback() && self.token().is_none() {
            anyhow::bail!(
                "AGENTCTL_TOKEN is required when AGENTCTL_LISTEN_HOST ({}) is not a loopback address",
                self.listen_host
            );
        }
        Ok(())
    }

    /// The socket address to listen on.
    pub fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(self.listen_host, self.port)
    }

    /// [`Config::request_timeout_ms`] as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// [`Config::agent_request_timeout_ms`] as a duration.
    pub fn agent_request_timeout(&self) -> Duration {
        Duration::from_millis(self.agent_request_timeout_ms)
    }

    /// The hub's limits, as the binary uses them.
    pub fn hub_limits(&self) -> crate::hub::HubLimits {
        crate::hub::HubLimits {
            queue_messages: self.subscriber_queue_len(),
            queue_bytes: self.subscriber_queue_bytes,
            max_subscribers: self.max_subscribers,
        }
    }

    /// The router's limits, as the binary uses them.
    pub fn router_limits(&self) -> crate::router::RouterLimits {
        crate::router::RouterLimits {
            max_pending_calls: self.max_pending_calls,
            max_pending_agent_requests: self.max_pending_agent_requests,
            agent_request_timeout: self.agent_request_timeout(),
        }
    }

    /// The connection limits, as the binary uses them.
    pub fn server_limits(&self) -> crate::server::ServerLimits {
        crate::server::ServerLimits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            max_connections: self.max_connections,
        }
    }

    /// [`Config::subscriber_queue`] as a channel capacity.
    pub fn subscriber_queue_len(&self) -> usize {
        self.subscriber_queue.max(1)
    }

    /// The agent's argv: [`Config::agent_command`] split like a POSIX shell splits words.
    ///
    /// # Errors
    /// [`CommandLineError`] when the quoting is unbalanced or the command is empty.
    pub fn agent_argv(&self) -> Result<Vec<String>, CommandLineError> {
        split_command_line(&self.agent_command)
    }

    /// The names of the extra variables passed to the agent in allowlist mode ([`Config::agent_env`] without
    /// blanks and without any `AGENTCTL_*` name).
    pub fn agent_env_names(&self) -> Vec<String> {
        self.agent_env
            .iter()
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty() && !is_agentctl_variable(name.as_ref()))
            .collect()
    }
}

/// Parses a count or size in `MIN..=MAX`: clap refuses anything else at boot with exit status 2, before the port
/// is bound (a zero limit would leave agentctl unable to do its job; a huge one must not panic later).
fn usize_in<const MIN: usize, const MAX: usize>(text: &str) -> Result<usize, String> {
    let value = text.trim().parse::<usize>().map_err(|e| e.to_string())?;
    check_range(value, MIN, MAX)
}

/// Parses a duration in milliseconds (or a count) in `MIN..=MAX`, like [`usize_in`].
fn u64_in<const MIN: u64, const MAX: u64>(text: &str) -> Result<u64, String> {
    let value = text.trim().parse::<u64>().map_err(|e| e.to_string())?;
    check_range(value, MIN, MAX)
}

fn check_range<T: PartialOrd + std::fmt::Display>(value: T, min: T, max: T) -> Result<T, String> {
    if value < min {
        return Err(format!("must be at least {min}"));
    }
    if value > max {
        return Err(format!("must be at most {max}"));
    }
    Ok(value)
}

/// Why `AGENTCTL_AGENT_COMMAND` cannot be split into words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandLineError {
    /// Unbalanced quotes or a trailing backslash.
    #[error("agent command has unbalanced quoting")]
    Unbalanced,
    /// No words at all.
    #[error("agent command is empty")]
    Empty,
}

impl CommandLineError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            CommandLineError::Unbalanced => "agent_command_unbalanced",
            CommandLineError::Empty => "agent_command_empty",
        }
    }
}

/// Splits `line` into argv words like a POSIX shell (quotes and backslashes honoured, no expansion of any kind).
///
/// # Errors
/// [`CommandLineError::Unbalanced`] for unbalanced quotes, [`CommandLineError::Empty`] for no words.
pub fn split_command_line(line: &str) -> Result<Vec<String>, CommandLineError> {
    let words = shlex::split(line).ok_or(CommandLineError::Unbalanced)?;
    if words.is_empty() {
        return Err(CommandLineError::Empty);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expect: Result<&[&str], CommandLineError>) {
        let got = split_command_line(line);
        let expect = expect.map(|words| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>());
        assert_eq!(got, expect, "{line:?}");
    }

    #[test]
    fn agent_command_is_split_like_a_posix_shell() {
        check("auggie --acp", Ok(&["auggie", "--acp"]));
        check(
            r#"/usr/bin/agent --name "two words" 'single $HOME' a\ b"#,
            Ok(&[
                "/usr/bin/agent",
                "--name",
                "two words",
                "single $HOME",
                "a b",
            ]),
        );
        check("agent; rm -rf /", Ok(&["agent;", "rm", "-rf", "/"]));
        check("  spaced\targs  ", Ok(&["spaced", "args"]));
        check("agent 'open", Err(CommandLineError::Unbalanced));
        check("   ", Err(CommandLineError::Empty));
    }

    #[test]
    fn error_codes_are_stable() {
        assert_eq!(
            CommandLineError::Unbalanced.code(),
            "agent_command_unbalanced"
        );
        assert_eq!(CommandLineError::Empty.code(), "agent_command_empty");
    }

    #[test]
    fn defaults_match_the_protocol_note() {
        let config = Config::try_parse_from(["agentctl"]).unwrap();
        assert_eq!(config.port, 9999);
        assert_eq!(config.listen_host, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(config.agent_command, "auggie --acp");
        assert!(!config.auto_start);
        assert_eq!(config.log_level, "info");
        assert_eq!(config.output_buffer_size, 1000);
        assert_eq!(config.token, None);
        assert_eq!(config.token_file, None);
        assert!(!config.auto_approve_permissions);
        assert_eq!(config.request_timeout_ms, 600_000);
        assert_eq!(config.max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES);
    }

    #[test]
    fn the_parsed_defaults_are_the_documented_limits() {
        let config = Config::try_parse_from(["agentctl"]).unwrap();
        assert_eq!(
            config.hub_limits(),
            crate::hub::HubLimits {
                queue_messages: 4096,
                queue_bytes: 256 << 20,
                max_subscribers: 64,
            }
        );
        assert_eq!(
            config.router_limits(),
            crate::router::RouterLimits {
                max_pending_calls: 1024,
                max_pending_agent_requests: 1024,
                agent_request_timeout: Duration::from_secs(600),
            }
        );
        assert_eq!(
            config.server_limits(),
            crate::server::ServerLimits {
                header_read_timeout: Duration::from_secs(30),
                max_connections: 512,
            }
        );
        assert_eq!(
            config.router_limits(),
            crate::router::RouterLimits::default()
        );
        assert_eq!(
            config.server_limits(),
            crate::server::ServerLimits::default()
        );
        assert_eq!(config.max_stdin_queue_bytes, 128 << 20);
        assert_eq!(config.idle_timeout_ms, 30_000);
        assert_eq!(config.body_read_timeout_ms, 30_000);
        assert_eq!(config.output_buffer_size, 1000);
        assert_eq!(config.max_output_line_bytes, 16 << 10);
        assert_eq!((config.stop_grace_ms, config.term_grace_ms), (5_000, 3_000));
        assert_eq!(config.agent_env_mode, AgentEnvMode::Inherit);
    }

    #[test]
    fn zero_limits_are_refused_at_boot() {
        for flag in [
            "--max-message-bytes",
            "--max-subscribers",
            "--max-pending-calls",
            "--output-buffer-size",
            "--max-output-line-bytes",
        ] {
            let error = Config::try_parse_from(["agentctl", flag, "0"]).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{flag}");
            assert!(
                error.to_string().contains("must be at least 1"),
                "{flag}: {error}"
            );
            let config = Config::try_parse_from(["agentctl", flag, "1"]).unwrap();
            assert!(config.validate().is_ok(), "{flag} 1");
        }
    }

    #[test]
    fn workdir_must_be_an_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let check = |path: &std::path::Path| {
            Config::try_parse_from(["agentctl", "--workdir", path.to_str().unwrap()])
                .unwrap()
                .validate()
                .map_err(|e| e.to_string())
        };
        assert_eq!(check(dir.path()), Ok(()));
        assert!(check(&file).unwrap_err().contains("not a directory"));
        assert!(
            check(&dir.path().join("missing"))
                .unwrap_err()
                .contains("AGENTCTL_WORKDIR")
        );
    }

    #[test]
    fn agent_env_never_carries_the_token() {
        let config = Config::try_parse_from([
            "agentctl",
            "--agent-env",
            "API_KEY, ,AGENTCTL_TOKEN,OTHER,AGENTCTL_PORT",
        ])
        .unwrap();
        assert_eq!(
            config.agent_env_names(),
            vec!["API_KEY".to_owned(), "OTHER".to_owned()]
        );
    }

    #[test]
    fn every_limit_is_bounded_at_its_maximum_and_refused_one_past_it() {
        let week = MAX_DURATION_MS.to_string();
        let week_plus = (MAX_DURATION_MS + 1).to_string();
        let usize_max = usize::MAX.to_string();
        for (flag, max, past) in [
            ("--output-buffer-size", "1000000", "1000001"),
            ("--max-message-bytes", "1073741824", "1073741825"),
            ("--subscriber-queue", "1048576", "1048577"),
            ("--max-subscribers", "65536", "65537"),
            ("--max-pending-calls", "1048576", "1048577"),
            ("--max-pending-agent-requests", "1048576", "1048577"),
            ("--max-output-line-bytes", "16777216", "16777217"),
            ("--max-connections", "65536", "65537"),
            ("--request-timeout-ms", &week, &week_plus),
            ("--agent-request-timeout-ms", &week, &week_plus),
            ("--stop-grace-ms", &week, &week_plus),
            ("--term-grace-ms", &week, &week_plus),
            ("--header-read-timeout-ms", &week, &week_plus),
            ("--idle-timeout-ms", &week, &week_plus),
        ] {
            let config = Config::try_parse_from(["agentctl", flag, max]).unwrap();
            assert!(config.validate().is_ok(), "{flag} {max}");
            let error = Config::try_parse_from(["agentctl", flag, past]).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{flag} {past}");
            assert!(
                error.to_string().contains("must be at most"),
                "{flag}: {error}"
            );
        }
        // The huge values of issue 12 parse as "too large", never panic later.
        for flag in ["--subscriber-queue", "--output-buffer-size"] {
            let error = Config::try_parse_from(["agentctl", flag, &usize_max]).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{flag}");
        }
        for flag in [
            "--subscriber-queue-bytes",
            "--max-stdin-queue-bytes",
            "--max-pending-agent-requests",
            "--max-connections",
            "--header-read-timeout-ms",
            "--idle-timeout-ms",
        ] {
            let error = Config::try_parse_from(["agentctl", flag, "0"]).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{flag} 0");
        }
    }

    #[test]
    fn the_token_file_is_read_once_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret-token\n").unwrap();
        let mut config =
            Config::try_parse_from(["agentctl", "--token-file", path.to_str().unwrap()]).unwrap();
        assert!(
            config.validate().is_err(),
            "validate needs the file read first"
        );
        config.load_token_file().unwrap();
        assert_eq!(config.token(), Some("s3cret-token"));
        assert!(config.validate().is_ok());
        // Read once: a later change does not matter.
        std::fs::write(&path, "other\n").unwrap();
        assert_eq!(config.token(), Some("s3cret-token"));
        assert!(
            !format!("{config:?}").contains("s3cret"),
            "Debug shows the token"
        );
        let load = |content: &[u8]| {
            std::fs::write(&path, content).unwrap();
            let mut config =
                Config::try_parse_from(["agentctl", "--token-file", path.to_str().unwrap()])
                    .unwrap();
            config.load_token_file().map_err(|e| e.to_string())
        };
        assert!(load(b"").unwrap_err().contains("empty"));
        assert!(load(b"\n").unwrap_err().contains("empty"));
        assert!(load(b"a\nb\n").unwrap_err().contains("more than one line"));
        assert!(load(&[0xff, 0xfe]).unwrap_err().contains("utf-8"));
        assert!(
            load(&vec![b'a'; 4097])
                .unwrap_err()
                .contains("larger than 4096")
        );
        assert!(load(&vec![b'a'; 4096]).is_ok());
        let error = load(b"a\nsecret-second-line").unwrap_err();
        assert!(!error.contains("secret-second-line"), "{error}");
        // Exclusive with AGENTCTL_TOKEN.
        let error = Config::try_parse_from([
            "agentctl",
            "--token",
            "x",
            "--token-file",
            path.to_str().unwrap(),
        ])
        .unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }
}
