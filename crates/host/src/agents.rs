//! The agents registry: the agent from the AWP launch variables, named agents from `agents.toml` and the bundled
//! `awp-agent`, each validated before use.
//!
//! `agents.toml` (in the config directory, see [`crate::paths::config_dir`]):
//!
//! ```toml
//! # Optional: the agent `chat` uses without --agent.
//! default = "claude"
//!
//! [[agents]]
//! name = "claude"                       # [A-Za-z0-9._-]{1,64}; not "env" or "awp-agent"
//! protocol = "stream-json"              # awp-jsonl | stream-json | acp
//! executable = "/usr/local/bin/claude"  # absolute path to an executable file; a symlink is resolved at load
//! args = ["--permission-mode", "acceptEdits"]
//! env = { ANTHROPIC_API_KEY = "sk-..." }
//! model = "sonnet"
//! provider = "local-llm"                # a host provider (id or name, `deepchat provider list`): its base URL,
//!                                       # model and API key reach the agent as OPENAI_BASE_URL, OPENAI_MODEL,
//!                                       # OPENAI_API_KEY at each launch (see crate::providers::agent_env)
//! remote_api_opt_in = false             # allow non-loopback http(s) URLs in args/env
//! max_line_bytes = 4194304              # longest stdout line (JSON Lines / JSON-RPC message) accepted
//! include_partial_messages = true       # stream-json only: token-level deltas (default true)
//! control_protocol = true               # stream-json only: Claude Code's control protocol (default: on when
//!                                       # the executable's file name is `claude`)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwire_awp::launch::{
    VAR_ARGS_JSON, VAR_DEFAULT_MODEL, VAR_ENV_JSON, VAR_EXECUTABLE, VAR_REMOTE_API_OPT_IN,
};
use agentwire_awp::{LaunchConfig, LaunchError, Protocol};

/// File name of the agents configuration inside the config directory.
pub const CONFIG_FILE: &str = "agents.toml";
/// Name of the agent configured by the `AWP_AGENT_*` variables.
pub const ENV_AGENT: &str = "env";
/// Name of the bundled reference agent (`awp-agent` next to the `awp-host` executable).
pub const BUNDLED_AGENT: &str = "awp-agent";
/// Default of an agent's `max_line_bytes`: 4 MiB, the AWP contract's stdout line limit.
pub const DEFAULT_MAX_LINE_BYTES: usize = agentwire_jsonl::DEFAULT_MAX_LINE_BYTES;
/// Largest `max_line_bytes` an `agents.toml` entry may set: 256 MiB (a line is buffered whole in memory).
pub const MAX_MAX_LINE_BYTES: usize = 256 * 1024 * 1024;
/// Default of an agent's first-output timeout: 120 s ([`AgentSpec::first_output_timeout`]).
pub const DEFAULT_FIRST_OUTPUT_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest `first_output_timeout_secs` an `agents.toml` entry (or `--first-output-timeout`) may set: one day.
pub const MAX_FIRST_OUTPUT_TIMEOUT_SECS: u64 = 86_400;
/// Maximum size of `agents.toml` in bytes (1 MiB); a larger file is [`ConfigError::TooLarge`].
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Wire protocol an agent speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentProtocol {
    /// AWP JSON Lines (`awp-jsonl`).
    AwpJsonl,
    /// Claude Code's stream-json (`stream-json`).
    StreamJson,
    /// Agent Client Protocol v1 over stdio (`acp`).
    Acp,
}

impl AgentProtocol {
    /// `awp-jsonl | stream-json | acp`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentProtocol::AwpJsonl => "awp-jsonl",
            AgentProtocol::StreamJson => "stream-json",
            AgentProtocol::Acp => "acp",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "awp-jsonl" => Some(AgentProtocol::AwpJsonl),
            "stream-json" => Some(AgentProtocol::StreamJson),
            "acp" => Some(AgentProtocol::Acp),
            _ => None,
        }
    }

    /// The AWP protocol, `None` for ACP.
    pub fn awp(self) -> Option<Protocol> {
        match self {
            AgentProtocol::AwpJsonl => Some(Protocol::AwpJsonl),
            AgentProtocol::StreamJson => Some(Protocol::StreamJson),
            AgentProtocol::Acp => None,
        }
    }
}

/// Where an agent definition comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentSource {
    /// The `AWP_AGENT_*` variables.
    Environment,
    /// An `[[agents]]` entry of `agents.toml`.
    ConfigFile,
    /// The bundled `awp-agent`.
    Bundled,
}

impl AgentSource {
    /// `environment | config | bundled`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentSource::Environment => "environment",
            AgentSource::ConfigFile => "config",
            AgentSource::Bundled => "bundled",
        }
    }
}

/// A usable agent definition. `Debug` never shows env values.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// Name used with `--agent`.
    pub name: String,
    /// Where it is defined: phrases launch errors in that place's terms (`agents.toml` fields or the
    /// `AWP_AGENT_*` variables) wherever the launch is validated again (a turn, `--agent-arg`).
    pub source: AgentSource,
    /// Protocol.
    pub protocol: AgentProtocol,
    /// Launch configuration (for ACP agents: executable, args, env; protocol unused).
    pub launch: LaunchConfig,
    /// Longest stdout line accepted from the agent, in bytes (without the newline): a JSON Lines event for
    /// `awp-jsonl`/`stream-json` agents, a JSON-RPC message for ACP agents. Default [`DEFAULT_MAX_LINE_BYTES`]
    /// (4 MiB), at most [`MAX_MAX_LINE_BYTES`]; `agents.toml` key `max_line_bytes`. A longer line fails the turn
    /// with `stdout_line_too_long`, naming this setting.
    pub max_line_bytes: usize,
    /// How long an `awp-jsonl`/`stream-json` agent may stay silent after its turn was written before the turn
    /// fails with `agent_first_output_timeout` (a wrong protocol, a login prompt); with [`Self::control_protocol`]
    /// on it bounds the wait for the `initialize` answer too (the same error). Default
    /// [`DEFAULT_FIRST_OUTPUT_TIMEOUT`]; `agents.toml` key `first_output_timeout_secs` (0 = `None`, off; at most
    /// [`MAX_FIRST_OUTPUT_TIMEOUT_SECS`]). ACP agents: unused (their `initialize` answer is timed instead).
    pub first_output_timeout: Option<Duration>,
    /// `stream-json` agents only: launch with [`INCLUDE_PARTIAL_MESSAGES`], so Claude Code streams its text as
    /// token-level `stream_event` deltas instead of one complete message per step. Default `true`;
    /// `agents.toml` key `include_partial_messages` (an error on agents of other protocols). Unused by
    /// `awp-jsonl` and ACP agents.
    pub include_partial_messages: bool,
    /// `stream-json` agents only: speak Claude Code's control protocol (`agentwire_awp::control`): send
    /// `initialize` after launch and wait for its answer (at most the first-output timeout), `interrupt`
    /// on the first Ctrl-C, and launch with `--permission-prompt-tool stdio` so tool permissions are asked of the
    /// host (`can_use_tool`). Default: on for a `stream-json` agent whose executable's file name is `claude`,
    /// off otherwise; `agents.toml` key `control_protocol` (an error on agents of other protocols).
    pub control_protocol: bool,
    /// A host provider (id or unique name) whose endpoint, model and key the agent gets in `OPENAI_BASE_URL`,
    /// `OPENAI_MODEL` and `OPENAI_API_KEY` at each launch ([`crate::providers::agent_env`]), so a key is
    /// configured once, in the host. `agents.toml` key `provider`; default `None`.
    pub provider: Option<String>,
}

/// How long after an `interrupt` control request the host waits for the agent's `result` before it falls back
/// to the stop ladder: 10 s.
pub const CONTROL_INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// The default of [`AgentSpec::control_protocol`]: a `stream-json` agent whose executable is named `claude`.
pub fn control_protocol_default(protocol: AgentProtocol, executable: &Path) -> bool {
    protocol == AgentProtocol::StreamJson && executable.file_name().is_some_and(|n| n == "claude")
}

/// Claude Code's flag for token-level streaming in `stream-json` mode (its `stream_event` wrappers), added after
/// the stream-json flags when [`AgentSpec::include_partial_messages`] is on.
pub const INCLUDE_PARTIAL_MESSAGES: &str = "--include-partial-messages";

impl AgentSpec {
    /// Extra launch arguments of this agent beyond [`LaunchConfig::plan`]'s, for a `stream-json` agent:
    /// [`INCLUDE_PARTIAL_MESSAGES`] with [`include_partial_messages`](Self::include_partial_messages) on, then
    /// `--permission-prompt-tool stdio` with [`control_protocol`](Self::control_protocol) on; else none.
    pub fn extra_args(&self) -> Vec<&'static str> {
        let mut args = Vec::new();
        if self.protocol == AgentProtocol::StreamJson {
            if self.include_partial_messages {
                args.push(INCLUDE_PARTIAL_MESSAGES);
            }
            if self.control_protocol {
                args.extend(agentwire_awp::control::PERMISSION_PROMPT_TOOL_ARGS);
            }
        }
        args
    }
}

impl std::fmt::Debug for AgentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSpec")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("protocol", &self.protocol)
            .field("launch", &self.launch)
            .field("max_line_bytes", &self.max_line_bytes)
            .field("first_output_timeout", &self.first_output_timeout)
            .field("include_partial_messages", &self.include_partial_messages)
            .field("control_protocol", &self.control_protocol)
            .field("provider", &self.provider)
            .finish()
    }
}

/// Why an agent (or the whole configuration) cannot be used.
#[non_exhaustive]
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `agents.toml` is not UTF-8: the position of the first byte that is not.
    #[error("{}:{line}:{column}: invalid: not UTF-8 text", .path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
        /// 1-based column of the first invalid byte, in characters.
        column: usize,
    },
    /// `agents.toml` could not be read.
    #[error("cannot read {path}: {kind}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The IO error kind.
        kind: std::io::ErrorKind,
    },
    /// `agents.toml` is larger than [`MAX_CONFIG_BYTES`].
    #[error("{path} is larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// `agents.toml` is not valid TOML or has an unexpected shape.
    #[error("{}:{line}:{column}: invalid: {message}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error (1 when the parser gave no position).
        line: usize,
        /// 1-based column of the error, in characters.
        column: usize,
        /// The parser's message (never a value).
        message: String,
    },
    /// An entry field is missing.
    #[error("missing field `{field}`")]
    MissingField {
        /// Field name.
        field: &'static str,
    },
    /// An entry field has the wrong type or an unknown field is present.
    #[error("invalid entry: {message}")]
    InvalidEntry {
        /// What is wrong.
        message: String,
    },
    /// The protocol is not `awp-jsonl | stream-json | acp`.
    #[error("unknown protocol (expected awp-jsonl, stream-json or acp)")]
    UnknownProtocol,
    /// The name is not `[A-Za-z0-9._-]{1,64}`.
    #[error("invalid agent name (expected 1 to 64 of A-Z a-z 0-9 . _ -)")]
    InvalidName,
    /// Another entry already has this name.
    #[error("duplicate agent name")]
    DuplicateName,
    /// The name belongs to a built-in agent ([`ENV_AGENT`] or [`BUNDLED_AGENT`]).
    #[error("reserved agent name (`env` and `awp-agent` are built in)")]
    ReservedName,
    /// A launch rule failed (executable, args, env, model, remote URL).
    #[error("{message}")]
    Launch {
        /// The rule's message, phrased with the config field names.
        message: String,
        /// The launch rule's stable code, e.g. `executable_not_found`.
        launch_code: &'static str,
    },
    /// The bundled `awp-agent` is not next to the `awp-host` executable.
    #[error("bundled awp-agent not found at {path}")]
    BundledAgentMissing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// `default` names no configured agent.
    #[error("{}:{line}:{column}: default agent `{name}` is not configured", .path.display())]
    UnknownDefault {
        /// The name.
        name: String,
        /// The file.
        path: PathBuf,
        /// 1-based line of the `default` value.
        line: usize,
        /// 1-based column of the `default` value, in characters.
        column: usize,
    },
}

impl ConfigError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::Unreadable { .. } => "config_unreadable",
            ConfigError::TooLarge { .. } => "config_too_large",
            ConfigError::Syntax { .. } | ConfigError::NotUtf8 { .. } => "config_invalid",
            ConfigError::MissingField { .. } => "agent_field_missing",
            ConfigError::InvalidEntry { .. } => "agent_entry_invalid",
            ConfigError::UnknownProtocol => "protocol_unknown",
            ConfigError::InvalidName => "agent_name_invalid",
            ConfigError::DuplicateName => "agent_name_duplicate",
            ConfigError::ReservedName => "agent_name_reserved",
            ConfigError::Launch { launch_code, .. } => launch_code,
            ConfigError::BundledAgentMissing { .. } => "bundled_agent_missing",
            ConfigError::UnknownDefault { .. } => "default_agent_unknown",
        }
    }

    /// A launch rule's failure, phrased for where the agent is defined: the `AWP_AGENT_*` variables for
    /// [`AgentSource::Environment`], the `agents.toml` fields (`args`, `env`, `remote_api_opt_in = true`, …)
    /// otherwise. The code stays the launch rule's.
    pub fn from_launch(err: &LaunchError, source: AgentSource) -> Self {
        ConfigError::Launch {
            message: in_source_terms(&err.to_string(), source),
            launch_code: err.code(),
        }
    }
}

/// How an agent defined in `source` is allowed non-loopback URLs in its arguments and env, as the end of a
/// `remote_url_not_allowed` message.
pub fn remote_opt_in_hint(source: AgentSource) -> &'static str {
    match source {
        AgentSource::Environment => "set AWP_AGENT_REMOTE_API_OPT_IN=1 to allow it",
        AgentSource::ConfigFile => {
            "set remote_api_opt_in = true on the agent in agents.toml to allow it"
        }
        AgentSource::Bundled => {
            "the bundled agent cannot allow it: configure the agent in agents.toml with remote_api_opt_in = true"
        }
    }
}

/// `text` (a launch rule's message, in `AWP_AGENT_*` terms) rephrased for an agent defined in `source`: unchanged
/// for [`AgentSource::Environment`]; with the `agents.toml` field names otherwise, and the remote-URL hint saying
/// `remote_api_opt_in = true` in `agents.toml` (the bundled agent has no such switch: the hint says to configure
/// it in `agents.toml`).
pub fn in_source_terms(text: &str, source: AgentSource) -> String {
    let mut message = text.to_owned();
    if source == AgentSource::Environment {
        return message;
    }
    message = message.replace(
        "set AWP_AGENT_REMOTE_API_OPT_IN=1 to allow it",
        remote_opt_in_hint(source),
    );
    {
        for (var, field) in [
            (VAR_EXECUTABLE, "executable"),
            (VAR_ARGS_JSON, "args"),
            (VAR_ENV_JSON, "env"),
            (VAR_DEFAULT_MODEL, "model"),
            (VAR_REMOTE_API_OPT_IN, "remote_api_opt_in"),
        ] {
            message = message.replace(var, field);
        }
        message = message.replace("remote_api_opt_in=1", "remote_api_opt_in = true");
    }
    message
}

/// One listed agent: what was configured and whether it can be used.
#[derive(Clone, Debug)]
pub struct AgentEntry {
    /// Name.
    pub name: String,
    /// Where it comes from.
    pub source: AgentSource,
    /// Protocol as configured (may be invalid text).
    pub protocol: Option<String>,
    /// Executable as configured.
    pub executable: Option<PathBuf>,
    /// For an `agents.toml` entry whose `executable` is a symbolic link: the file it resolves to (canonical),
    /// resolved once at load; that file is what runs. `None` otherwise.
    pub resolved_executable: Option<PathBuf>,
    /// Model as configured.
    pub model: Option<String>,
    /// Where in `agents.toml` the entry is, `(line, column)`, 1-based (column in characters): for an error of one
    /// field (a value of the wrong type, an unknown key, a value out of range, an unknown protocol, a bad name)
    /// that field's value (its key for an unknown key); otherwise where the entry starts. `None` for the built-in
    /// agents.
    pub location: Option<(usize, usize)>,
    /// The usable definition, or why not.
    pub status: Result<AgentSpec, ConfigError>,
}

impl AgentEntry {
    /// True when the agent passed every check.
    pub fn is_usable(&self) -> bool {
        self.status.is_ok()
    }
}

/// Why `chat` cannot get an agent.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No agent has this name.
    #[error("no agent named `{name}` (see `awp-host agents list`)")]
    NotFound {
        /// The name asked for.
        name: String,
    },
    /// The agent is configured but failed validation.
    #[error("agent `{name}`{at} is unusable: {reason}")]
    Unusable {
        /// The agent.
        name: String,
        /// Where it is configured: ` (agents.toml:LINE:COLUMN)`, or empty for a built-in agent.
        at: String,
        /// Why.
        reason: ConfigError,
    },
}

impl AgentError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::NotFound { .. } => "agent_not_found",
            AgentError::Unusable { reason, .. } => reason.code(),
        }
    }
}

/// Every known agent and the default one.
#[derive(Clone, Debug)]
pub struct AgentRegistry {
    entries: Vec<AgentEntry>,
    default: String,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default: Option<String>,
    #[serde(default)]
    agents: Vec<toml::Spanned<toml::Table>>,
}

/// 1-based `(line, column)` of byte `offset` in `text` (column in characters; clamped to the text).
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).unwrap_or_default().chars().count() + 1;
    (line, column)
}

/// `max_line_bytes` as written: a non-negative TOML integer (the range is checked with the entry); anything else
/// (`-1`, `"4MiB"`, `1.5`) makes the entry invalid with a message naming the key (located like other entry errors).
fn max_line_bytes_value<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    use serde::Deserialize as _;
    match toml::Value::deserialize(deserializer)? {
        toml::Value::Integer(n) if n >= 0 => Ok(Some(n.unsigned_abs())),
        other => Err(serde::de::Error::custom(format!(
            "max_line_bytes must be a whole number of bytes in 1..={MAX_MAX_LINE_BYTES}, not {other}"
        ))),
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    name: Option<String>,
    protocol: Option<String>,
    executable: Option<PathBuf>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    model: Option<String>,
    #[serde(default)]
    remote_api_opt_in: bool,
    #[serde(default, deserialize_with = "max_line_bytes_value")]
    max_line_bytes: Option<u64>,
    first_output_timeout_secs: Option<u64>,
    include_partial_messages: Option<bool>,
    control_protocol: Option<bool>,
    provider: Option<String>,
}

/// The variables a host provider fills ([`crate::providers::agent_env`]); an entry with `provider` may not set them
/// in `env` too.
pub const PROVIDER_ENV_VARS: [&str; 3] = ["OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"];

/// `provider = "…"`: 1..=256 characters without control characters, and no `env` entry for the variables the
/// provider fills.
fn check_provider_reference(
    provider: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    if provider.is_empty()
        || provider.chars().count() > 256
        || provider.chars().any(char::is_control)
    {
        return Err(ConfigError::InvalidEntry {
            message: "provider must be 1 to 256 characters without control characters".to_owned(),
        });
    }
    if let Some(var) = PROVIDER_ENV_VARS.iter().find(|v| env.contains_key(**v)) {
        return Err(ConfigError::InvalidEntry {
            message: format!("provider and env.{var} conflict: the provider fills {var}"),
        });
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn validated(
    name: &str,
    protocol: AgentProtocol,
    launch: LaunchConfig,
    source: AgentSource,
) -> Result<AgentSpec, ConfigError> {
    launch.validate().map_err(|e| {
        let mut err = ConfigError::from_launch(&e, source);
        // Name the file a refused executable is (the link's target is said below).
        if let (
            LaunchError::ExecutableNotAbsolute
            | LaunchError::ExecutableNotFound
            | LaunchError::ExecutableUnreadable { .. }
            | LaunchError::ExecutableNotRegularFile
            | LaunchError::ExecutableNotExecutable,
            ConfigError::Launch { message, .. },
        ) = (&e, &mut err)
        {
            message.push_str(&format!(": {}", launch.executable.display()));
        }
        // Say where a refused link leads, so the fix (pointing at the file itself) is obvious.
        if let (LaunchError::ExecutableIsSymlink, ConfigError::Launch { message, .. }) =
            (&e, &mut err)
        {
            let target = std::fs::canonicalize(&launch.executable)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "a file that does not exist".to_owned());
            message.push_str(&format!(
                ": {} points to {target}",
                launch.executable.display()
            ));
        }
        err
    })?;
    let control_protocol = control_protocol_default(protocol, &launch.executable);
    Ok(AgentSpec {
        name: name.to_owned(),
        source,
        protocol,
        launch,
        max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        first_output_timeout: Some(DEFAULT_FIRST_OUTPUT_TIMEOUT),
        include_partial_messages: true,
        control_protocol,
        provider: None,
    })
}

/// An `agents.toml` executable that is a symbolic link, resolved once to its canonical file (the AWP launch
/// rules refuse links, so the resolved file is what is validated and run). `None` when it is not a link (or
/// cannot be inspected: validation then reports why).
fn resolve_link(executable: &Path) -> Option<Result<PathBuf, ConfigError>> {
    let meta = std::fs::symlink_metadata(executable).ok()?;
    if !meta.file_type().is_symlink() {
        return None;
    }
    Some(std::fs::canonicalize(executable).map_err(|e| {
        // Name what the link points to (as written in the link), so a dangling link says which file is missing.
        let target = std::fs::read_link(executable)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".to_owned());
        ConfigError::Launch {
            message: format!(
                "executable {} is a symbolic link to {target}, which cannot be resolved: {}",
                executable.display(),
                e.kind()
            ),
            launch_code: "executable_not_found",
        }
    }))
}

/// One `[[agents]]` entry as parsed with positions (byte spans into the file's text), to locate a field's error.
type SpannedEntry<'a> = toml::Spanned<toml::de::DeValue<'a>>;

/// The `[[agents]]` entries of `text` with their spans, in order; empty when the text does not parse (it did
/// for the caller) or has no `agents` array.
fn spanned_entries(text: &str) -> Vec<SpannedEntry<'_>> {
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        return Vec::new();
    };
    doc.into_inner()
        .into_iter()
        .find(|(key, _)| key.get_ref() == "agents")
        .and_then(|(_, value)| match value.into_inner() {
            toml::de::DeValue::Array(items) => Some(items.iter().cloned().collect()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Byte span of the value of the top-level key `key` of `text` (`None` when absent or the text does not parse).
fn top_level_span(text: &str, key: &str) -> Option<std::ops::Range<usize>> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    doc.get_ref()
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(_, value)| value.span())
}

/// Byte span of the value of `field` in a spanned entry.
fn field_span(entry: &SpannedEntry<'_>, field: &str) -> Option<std::ops::Range<usize>> {
    entry
        .get_ref()
        .as_table()?
        .iter()
        .find(|(key, _)| key.get_ref() == field)
        .map(|(_, value)| value.span())
}

/// The field an entry error is about, when it is about one field.
fn error_field(err: &ConfigError) -> Option<&'static str> {
    match err {
        ConfigError::UnknownProtocol => Some("protocol"),
        ConfigError::InvalidName => Some("name"),
        ConfigError::InvalidEntry { message } => [
            "max_line_bytes",
            "first_output_timeout_secs",
            "include_partial_messages",
            "control_protocol",
        ]
        .into_iter()
        .find(|field| message.starts_with(field)),
        ConfigError::Launch { launch_code, .. } => {
            if launch_code.starts_with("executable_") {
                Some("executable")
            } else if launch_code.starts_with("arg") {
                Some("args")
            } else if launch_code.starts_with("env_") {
                Some("env")
            } else if *launch_code == "model_invalid" {
                Some("model")
            } else {
                None
            }
        }
        _ => None,
    }
}

/// An entry of `agents.toml` (`text`), starting at `location`; `spanned` is the same entry with positions, used
/// to point an error of one field at that field.
fn entry_from_table(
    table: toml::Table,
    location: (usize, usize),
    text: &str,
    spanned: Option<&SpannedEntry<'_>>,
) -> AgentEntry {
    let (mut entry, shape_error) = entry_at_start(table, location);
    if let (Err(err), Some(spanned)) = (&entry.status, spanned) {
        let span = match err {
            // A type error or an unknown key: toml's own span, from the same entry with positions.
            _ if shape_error => {
                use serde::Deserialize as _;
                RawEntry::deserialize(toml::de::ValueDeserializer::from(spanned.clone()))
                    .err()
                    .and_then(|e| e.span())
            }
            _ => error_field(err).and_then(|field| field_span(spanned, field)),
        };
        if let Some(span) = span {
            entry.location = Some(line_column(text, span.start));
        }
    }
    entry
}

/// [`entry_from_table`] with every error located at the entry's start, and whether the error is of the entry's
/// shape (a type error or an unknown key, found by deserializing it).
fn entry_at_start(table: toml::Table, location: (usize, usize)) -> (AgentEntry, bool) {
    let name_hint = table
        .get("name")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_owned();
    let raw: RawEntry = match table.try_into() {
        Ok(raw) => raw,
        Err(e) => {
            let entry = AgentEntry {
                name: name_hint,
                source: AgentSource::ConfigFile,
                protocol: None,
                executable: None,
                resolved_executable: None,
                model: None,
                location: Some(location),
                status: Err(ConfigError::InvalidEntry {
                    message: e.message().to_owned(),
                }),
            };
            return (entry, true);
        }
    };
    let resolved = raw.executable.as_deref().and_then(resolve_link);
    let mut entry = AgentEntry {
        name: raw.name.clone().unwrap_or_default(),
        source: AgentSource::ConfigFile,
        protocol: raw.protocol.clone(),
        executable: raw.executable.clone(),
        resolved_executable: resolved.as_ref().and_then(|r| r.as_ref().ok().cloned()),
        model: raw.model.clone(),
        location: Some(location),
        status: Err(ConfigError::MissingField { field: "name" }),
    };
    entry.status = (|| {
        let name = raw
            .name
            .ok_or(ConfigError::MissingField { field: "name" })?;
        if !valid_name(&name) {
            return Err(ConfigError::InvalidName);
        }
        let protocol = raw
            .protocol
            .ok_or(ConfigError::MissingField { field: "protocol" })?;
        let protocol = AgentProtocol::parse(&protocol).ok_or(ConfigError::UnknownProtocol)?;
        let mut executable = raw.executable.ok_or(ConfigError::MissingField {
            field: "executable",
        })?;
        // A link named `claude` (Claude Code's usual install) counts as Claude Code, wherever it points.
        let named_claude = control_protocol_default(protocol, &executable);
        if let Some(resolved) = resolved {
            executable = resolved?;
        }
        let mut launch = LaunchConfig::new(executable);
        launch.prefix_args = raw.args;
        launch.env = raw.env;
        launch.protocol = protocol.awp().unwrap_or(Protocol::AwpJsonl);
        launch.default_model = raw.model.filter(|m| !m.is_empty());
        launch.remote_api_opt_in = raw.remote_api_opt_in;
        let max_line_bytes = match raw.max_line_bytes {
            None => DEFAULT_MAX_LINE_BYTES,
            Some(n) if n >= 1 && n <= MAX_MAX_LINE_BYTES as u64 => n as usize,
            Some(n) => {
                return Err(ConfigError::InvalidEntry {
                    message: format!(
                        "max_line_bytes = {n} is outside 1..={MAX_MAX_LINE_BYTES} bytes"
                    ),
                });
            }
        };
        let first_output_timeout = match raw.first_output_timeout_secs {
            None => Some(DEFAULT_FIRST_OUTPUT_TIMEOUT),
            Some(0) => None,
            Some(n) if n <= MAX_FIRST_OUTPUT_TIMEOUT_SECS => Some(Duration::from_secs(n)),
            Some(n) => {
                return Err(ConfigError::InvalidEntry {
                    message: format!(
                        "first_output_timeout_secs = {n} is outside 0..={MAX_FIRST_OUTPUT_TIMEOUT_SECS}"
                    ),
                });
            }
        };
        if raw.include_partial_messages.is_some() && protocol != AgentProtocol::StreamJson {
            return Err(ConfigError::InvalidEntry {
                message: "include_partial_messages applies to stream-json agents only".to_owned(),
            });
        }
        if raw.control_protocol.is_some() && protocol != AgentProtocol::StreamJson {
            return Err(ConfigError::InvalidEntry {
                message: "control_protocol applies to stream-json agents only".to_owned(),
            });
        }
        if let Some(provider) = &raw.provider {
            check_provider_reference(provider, &launch.env)?;
        }
        let mut spec = validated(&name, protocol, launch, AgentSource::ConfigFile)?;
        spec.provider = raw.provider;
        spec.control_protocol = raw
            .control_protocol
            .unwrap_or(spec.control_protocol || named_claude);
        spec.max_line_bytes = max_line_bytes;
        spec.first_output_timeout = first_output_timeout;
        spec.include_partial_messages = raw.include_partial_messages.unwrap_or(true);
        Ok(spec)
    })();
    (entry, false)
}

impl AgentRegistry {
    /// Loads the registry: the `AWP_AGENT_*` agent (named [`ENV_AGENT`]) when `AWP_AGENT_CLI_EXECUTABLE` is set,
    /// the entries of `<config_dir>/agents.toml` when the file exists, and the bundled [`BUNDLED_AGENT`] found in
    /// `bundled_dir` (the directory of the `awp-host` executable).
    ///
    /// The default agent is `default` from the file when set, else [`ENV_AGENT`] when the variables are set, else
    /// [`BUNDLED_AGENT`]. A bad entry does not fail the load: it is listed with its error.
    ///
    /// # Errors
    /// File-level problems: [`ConfigError::Unreadable`], [`ConfigError::TooLarge`], [`ConfigError::Syntax`],
    /// [`ConfigError::UnknownDefault`].
    pub fn load(
        config_dir: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
        bundled_dir: Option<&Path>,
    ) -> Result<AgentRegistry, ConfigError> {
        let mut entries = Vec::new();
        // An empty `AWP_AGENT_CLI_EXECUTABLE=` counts as unset.
        if lookup(VAR_EXECUTABLE).is_some_and(|v| !v.is_empty()) {
            let executable = lookup(VAR_EXECUTABLE).map(PathBuf::from);
            let (protocol, model, status) = match LaunchConfig::from_vars(lookup) {
                Ok(Some(launch)) => {
                    let protocol = match launch.protocol {
                        Protocol::StreamJson => AgentProtocol::StreamJson,
                        _ => AgentProtocol::AwpJsonl,
                    };
                    (
                        Some(protocol.as_str().to_owned()),
                        launch.default_model.clone(),
                        validated(ENV_AGENT, protocol, launch, AgentSource::Environment),
                    )
                }
                Ok(None) => (
                    None,
                    None,
                    Err(ConfigError::MissingField {
                        field: "executable",
                    }),
                ),
                Err(e) => (
                    lookup(agentwire_awp::launch::VAR_PROTOCOL),
                    None,
                    Err(ConfigError::from_launch(&e, AgentSource::Environment)),
                ),
            };
            entries.push(AgentEntry {
                name: ENV_AGENT.to_owned(),
                source: AgentSource::Environment,
                protocol,
                executable,
                resolved_executable: None,
                model,
                location: None,
                status,
            });
        }
        let path = config_dir.join(CONFIG_FILE);
        let mut file_default = None;
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ConfigError::Unreadable {
                    path,
                    kind: e.kind(),
                });
            }
            Ok(meta) if meta.len() > MAX_CONFIG_BYTES => {
                return Err(ConfigError::TooLarge { path });
            }
            Ok(_) => {
                let bytes = std::fs::read(&path).map_err(|e| ConfigError::Unreadable {
                    path: path.clone(),
                    kind: e.kind(),
                })?;
                let text = String::from_utf8(bytes).map_err(|e| {
                    let valid = e.utf8_error().valid_up_to();
                    let before =
                        String::from_utf8_lossy(e.as_bytes().get(..valid).unwrap_or_default());
                    let (line, column) = line_column(&before, before.len());
                    ConfigError::NotUtf8 {
                        path: path.clone(),
                        line,
                        column,
                    }
                })?;
                if text.len() as u64 > MAX_CONFIG_BYTES {
                    return Err(ConfigError::TooLarge { path });
                }
                let raw: RawFile = toml::from_str(&text).map_err(|e| {
                    let (line, column) = e
                        .span()
                        .map_or((1, 1), |span| line_column(&text, span.start));
                    ConfigError::Syntax {
                        path: path.clone(),
                        line,
                        column,
                        message: e.message().trim().to_owned(),
                    }
                })?;
                file_default = raw.default.map(|name| {
                    let (line, column) = top_level_span(&text, "default")
                        .map_or((1, 1), |span| line_column(&text, span.start));
                    (name, path.clone(), line, column)
                });
                let spanned = spanned_entries(&text);
                for (index, table) in raw.agents.into_iter().enumerate() {
                    let location = line_column(&text, table.span().start);
                    let mut entry =
                        entry_from_table(table.into_inner(), location, &text, spanned.get(index));
                    let reserved = entry.name == ENV_AGENT || entry.name == BUNDLED_AGENT;
                    if entry.status.is_ok() && reserved {
                        entry.status = Err(ConfigError::ReservedName);
                    } else if entry.status.is_ok()
                        && entries.iter().any(|e: &AgentEntry| e.name == entry.name)
                    {
                        entry.status = Err(ConfigError::DuplicateName);
                    }
                    entries.push(entry);
                }
            }
        }
        let bundled_path =
            bundled_dir.map(|d| d.join(format!("{BUNDLED_AGENT}{}", std::env::consts::EXE_SUFFIX)));
        let status = match &bundled_path {
            Some(p) if p.is_file() => validated(
                BUNDLED_AGENT,
                AgentProtocol::AwpJsonl,
                LaunchConfig::new(p.clone()),
                AgentSource::Bundled,
            ),
            Some(p) => Err(ConfigError::BundledAgentMissing { path: p.clone() }),
            None => Err(ConfigError::BundledAgentMissing {
                path: PathBuf::from(BUNDLED_AGENT),
            }),
        };
        entries.push(AgentEntry {
            name: BUNDLED_AGENT.to_owned(),
            source: AgentSource::Bundled,
            protocol: Some(AgentProtocol::AwpJsonl.as_str().to_owned()),
            executable: bundled_path,
            resolved_executable: None,
            model: None,
            location: None,
            status,
        });
        let default = match file_default {
            Some((name, path, line, column)) => {
                if !entries.iter().any(|e| e.name == name) {
                    return Err(ConfigError::UnknownDefault {
                        name,
                        path,
                        line,
                        column,
                    });
                }
                name
            }
            None if entries.iter().any(|e| e.source == AgentSource::Environment) => {
                ENV_AGENT.to_owned()
            }
            None => BUNDLED_AGENT.to_owned(),
        };
        Ok(AgentRegistry { entries, default })
    }

    /// Every agent, in order: environment, config file entries, bundled.
    pub fn entries(&self) -> &[AgentEntry] {
        &self.entries
    }

    /// Name of the default agent.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// The entry that answers to `name`: the first with that name that was not refused for taking a name
    /// already owned (an `agents.toml` entry named `env` or `awp-agent` ([`ConfigError::ReservedName`]) or a
    /// repeated name ([`ConfigError::DuplicateName`]) never shadows the owner); else the first with that name.
    pub fn entry(&self, name: &str) -> Option<&AgentEntry> {
        let named = || self.entries.iter().filter(move |e| e.name == name);
        named()
            .find(|e| {
                !matches!(
                    e.status,
                    Err(ConfigError::ReservedName | ConfigError::DuplicateName)
                )
            })
            .or_else(|| named().next())
    }

    /// `true` when `entry` is the one the default agent resolves to ([`AgentRegistry::entry`] of
    /// [`AgentRegistry::default_name`]); a refused entry that merely shares the name is not.
    pub fn is_default(&self, entry: &AgentEntry) -> bool {
        self.entry(&self.default)
            .is_some_and(|owner| std::ptr::eq(owner, entry))
    }

    /// The usable agent `name` (the default agent when `None`), as [`AgentRegistry::entry`] finds it.
    ///
    /// # Errors
    /// [`AgentError::NotFound`], [`AgentError::Unusable`].
    pub fn resolve(&self, name: Option<&str>) -> Result<&AgentSpec, AgentError> {
        let name = name.unwrap_or(&self.default);
        let entry = self.entry(name).ok_or_else(|| AgentError::NotFound {
            name: name.to_owned(),
        })?;
        entry
            .status
            .as_ref()
            .map_err(|reason| AgentError::Unusable {
                name: name.to_owned(),
                at: entry
                    .location
                    .map(|(line, column)| format!(" ({CONFIG_FILE}:{line}:{column})"))
                    .unwrap_or_default(),
                reason: reason.clone(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Setup {
        _tmp: tempfile::TempDir,
        config: PathBuf,
        bin: PathBuf,
        exe: PathBuf,
    }

    fn setup(toml_text: Option<&str>) -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("config");
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join(BUNDLED_AGENT);
        std::fs::write(&exe, b"#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        if let Some(text) = toml_text {
            std::fs::write(
                config.join(CONFIG_FILE),
                text.replace("$EXE", &exe.display().to_string()),
            )
            .unwrap();
        }
        Setup {
            _tmp: tmp,
            config,
            bin,
            exe,
        }
    }

    fn load(s: &Setup, vars: &[(&str, String)]) -> Result<AgentRegistry, ConfigError> {
        let vars = vars.to_vec();
        AgentRegistry::load(
            &s.config,
            &move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()),
            Some(&s.bin),
        )
    }

    /// name → Ok(()) or the error code.
    fn check(reg: &AgentRegistry, expect: &[(&str, Result<(), &str>)]) {
        let got: Vec<(&str, Result<(), &str>)> = reg
            .entries()
            .iter()
            .map(|e| {
                (
                    e.name.as_str(),
                    e.status.as_ref().map(|_| ()).map_err(|e| e.code()),
                )
            })
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn max_line_bytes_defaults_to_4_mib_and_is_bounded_at_both_ends() {
        let entry = |name: &str, n: Option<u64>| {
            let key = n
                .map(|n| format!("max_line_bytes = {n}\n"))
                .unwrap_or_default();
            format!(
                "[[agents]]\nname = \"{name}\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$EXE\"\n{key}"
            )
        };
        let max = MAX_MAX_LINE_BYTES as u64;
        let text = [
            entry("default", None),
            entry("one", Some(1)),
            entry("top", Some(max)),
            entry("zero", Some(0)),
            entry("over", Some(max + 1)),
        ]
        .concat();
        let s = setup(Some(&text));
        let reg = load(&s, &[]).unwrap();
        let spec = |name: &str| reg.resolve(Some(name)).map(|a| a.max_line_bytes).ok();
        assert_eq!(spec("default"), Some(4 * 1024 * 1024));
        assert_eq!(spec("one"), Some(1));
        assert_eq!(spec("top"), Some(MAX_MAX_LINE_BYTES));
        for bad in ["zero", "over"] {
            let entry = reg.entries().iter().find(|e| e.name == bad).unwrap();
            let err = entry.status.as_ref().expect_err("refused");
            assert_eq!(err.code(), "agent_entry_invalid");
            assert!(err.to_string().contains("max_line_bytes"), "{err}");
        }
    }

    #[test]
    fn a_max_line_bytes_that_is_not_a_whole_number_names_the_key_and_its_place() {
        for value in ["-1", "\"4MiB\"", "1.5"] {
            let text = format!(
                "[[agents]]\nname = \"big\"\nprotocol = \"acp\"\nexecutable = \"$EXE\"\nmax_line_bytes = {value}\n"
            );
            let s = setup(Some(&text));
            let reg = load(&s, &[]).unwrap();
            let entry = reg.entries().iter().find(|e| e.name == "big").unwrap();
            // Located at the value (line 5, after `max_line_bytes = `).
            assert_eq!(entry.location, Some((5, 18)));
            let err = entry.status.as_ref().expect_err("refused");
            assert_eq!(err.code(), "agent_entry_invalid");
            let message = err.to_string();
            assert!(
                message.contains("max_line_bytes must be a whole number of bytes"),
                "{message}"
            );
        }
    }

    #[test]
    fn an_entry_error_of_one_field_points_at_that_field() {
        let text = "[[agents]]\nname = \"ok\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$EXE\"\n\n\
                    [[agents]]\nname = \"typed\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$EXE\"\n  \
                    first_output_timeout_secs = \"x\"\n\n\
                    [[agents]]\nname = \"unknown\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$EXE\"\n\
                    timeout = 5\n\n\
                    [[agents]]\nname = \"range\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$EXE\"\n\
                    first_output_timeout_secs = 999999\n\n\
                    [[agents]]\nname = \"proto\"\nprotocol = \"smoke\"\nexecutable = \"$EXE\"\n\n\
                    [[agents]]\nname = \"inline\"\nprotocol = \"acp\"\nexecutable = \"$EXE\"\n\
                    env = { A = 1 }\n\n\
                    [[agents]]\nprotocol = \"acp\"\nexecutable = \"$EXE\"\n";
        let s = setup(Some(text));
        let reg = load(&s, &[]).unwrap();
        let at = |name: &str| {
            let entry = reg.entries().iter().find(|e| e.name == name).unwrap();
            (
                entry.location,
                entry.status.as_ref().err().map(ConfigError::code),
            )
        };
        assert_eq!(at("ok"), (Some((1, 1)), None));
        // The value of the wrong type (line 10, after two spaces and `first_output_timeout_secs = `).
        assert_eq!(at("typed"), (Some((10, 31)), Some("agent_entry_invalid")));
        // An unknown key: the key itself.
        assert_eq!(at("unknown"), (Some((16, 1)), Some("agent_entry_invalid")));
        // A value out of range and an unknown protocol: the value.
        assert_eq!(at("range"), (Some((22, 29)), Some("agent_entry_invalid")));
        assert_eq!(at("proto"), (Some((26, 12)), Some("protocol_unknown")));
        // Inside an inline table: the inner value.
        assert_eq!(at("inline"), (Some((33, 13)), Some("agent_entry_invalid")));
        // A missing field has no field to point at: the entry.
        assert_eq!(at(""), (Some((35, 1)), Some("agent_field_missing")));
    }

    #[test]
    fn nothing_configured_means_the_bundled_agent() {
        let s = setup(None);
        let reg = load(&s, &[]).unwrap();
        check(&reg, &[(BUNDLED_AGENT, Ok(()))]);
        assert_eq!(reg.default_name(), BUNDLED_AGENT);
        assert_eq!(reg.resolve(None).unwrap().launch.executable, s.exe);
    }

    #[test]
    fn a_missing_bundled_agent_is_a_clear_error() {
        let s = setup(None);
        std::fs::remove_file(&s.exe).unwrap();
        let reg = load(&s, &[]).unwrap();
        let err = reg.resolve(None).unwrap_err();
        assert_eq!(err.code(), "bundled_agent_missing");
        assert!(
            err.to_string().contains("bundled awp-agent not found at"),
            "{err}"
        );
    }

    #[test]
    fn first_output_timeout_defaults_to_120_s_and_is_bounded() {
        let entry = |name: &str, secs: Option<u64>| {
            let key = secs
                .map(|n| format!("first_output_timeout_secs = {n}\n"))
                .unwrap_or_default();
            format!(
                "[[agents]]\nname = \"{name}\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$EXE\"\n{key}"
            )
        };
        let max = MAX_FIRST_OUTPUT_TIMEOUT_SECS;
        let text = [
            entry("default", None),
            entry("off", Some(0)),
            entry("max", Some(max)),
            entry("over", Some(max + 1)),
        ]
        .concat();
        let s = setup(Some(&text));
        let reg = load(&s, &[]).unwrap();
        let timeout = |name: &str| reg.resolve(Some(name)).map(|a| a.first_output_timeout);
        assert_eq!(
            timeout("default").unwrap(),
            Some(DEFAULT_FIRST_OUTPUT_TIMEOUT)
        );
        assert_eq!(timeout("off").unwrap(), None);
        assert_eq!(timeout("max").unwrap(), Some(Duration::from_secs(max)));
        assert_eq!(timeout("over").unwrap_err().code(), "agent_entry_invalid");
        assert_eq!(
            reg.resolve(Some(BUNDLED_AGENT))
                .unwrap()
                .first_output_timeout,
            Some(DEFAULT_FIRST_OUTPUT_TIMEOUT)
        );
    }

    #[test]
    fn stream_json_agents_include_partial_messages_unless_turned_off() {
        let entry = |name: &str, protocol: &str, key: Option<bool>| {
            let key = key
                .map(|b| format!("include_partial_messages = {b}\n"))
                .unwrap_or_default();
            format!(
                "[[agents]]\nname = \"{name}\"\nprotocol = \"{protocol}\"\nexecutable = \"$EXE\"\n{key}"
            )
        };
        let text = [
            entry("on", "stream-json", None),
            entry("off", "stream-json", Some(false)),
            entry("awp", "awp-jsonl", None),
            entry("wrong", "awp-jsonl", Some(true)),
        ]
        .concat();
        let s = setup(Some(&text));
        let reg = load(&s, &[]).unwrap();
        let args = |name: &str| reg.resolve(Some(name)).map(AgentSpec::extra_args);
        assert_eq!(args("on").unwrap(), [INCLUDE_PARTIAL_MESSAGES]);
        assert!(args("off").unwrap().is_empty());
        assert!(args("awp").unwrap().is_empty());
        assert_eq!(args("wrong").unwrap_err().code(), "agent_entry_invalid");
    }

    #[test]
    fn control_protocol_defaults_on_for_an_executable_named_claude_only() {
        use std::path::Path;
        let json = AgentProtocol::StreamJson;
        assert!(control_protocol_default(json, Path::new("/opt/bin/claude")));
        assert!(!control_protocol_default(
            json,
            Path::new("/opt/bin/claude-code")
        ));
        assert!(!control_protocol_default(
            json,
            Path::new("/opt/claude/agent")
        ));
        assert!(!control_protocol_default(
            AgentProtocol::AwpJsonl,
            Path::new("/opt/bin/claude")
        ));
        let entry = |name: &str, protocol: &str, key: Option<bool>| {
            let key = key
                .map(|b| format!("control_protocol = {b}\ninclude_partial_messages = false\n"))
                .unwrap_or_else(|| "include_partial_messages = false\n".to_owned());
            let key = if protocol == "stream-json" {
                key
            } else {
                key.replace("include_partial_messages = false\n", "")
            };
            format!(
                "[[agents]]\nname = \"{name}\"\nprotocol = \"{protocol}\"\nexecutable = \"$EXE\"\n{key}"
            )
        };
        let text = [
            entry("named-other", "stream-json", None),
            entry("on", "stream-json", Some(true)),
            entry("wrong", "acp", Some(true)),
        ]
        .concat();
        let s = setup(Some(&text));
        let reg = load(&s, &[]).unwrap();
        let args = |name: &str| reg.resolve(Some(name)).map(AgentSpec::extra_args);
        // The fixture's executable is not named `claude`: off unless asked for.
        assert!(args("named-other").unwrap().is_empty());
        assert_eq!(args("on").unwrap(), ["--permission-prompt-tool", "stdio"]);
        assert!(reg.resolve(Some("on")).unwrap().control_protocol);
        assert_eq!(args("wrong").unwrap_err().code(), "agent_entry_invalid");
    }

    #[test]
    fn line_column_counts_from_one_in_characters() {
        let text = "ab\nçd\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 3), (2, 1));
        // Byte 5 is after the two-byte `ç`: column 2 in characters.
        assert_eq!(line_column(text, 5), (2, 2));
        // Inside a character, and past the end: clamped.
        assert_eq!(line_column(text, 4), (2, 1));
        assert_eq!(line_column(text, 99), (3, 1));
    }

    #[cfg(unix)]
    #[test]
    fn an_environment_agent_behind_a_link_is_refused_naming_its_target() {
        let s = setup(None);
        let link = s.bin.join("link");
        std::os::unix::fs::symlink(&s.exe, &link).unwrap();
        let reg = load(&s, &[(VAR_EXECUTABLE, link.display().to_string())]).unwrap();
        let err = reg.resolve(Some(ENV_AGENT)).unwrap_err();
        assert_eq!(err.code(), "executable_is_symlink");
        let target = std::fs::canonicalize(&s.exe).unwrap();
        assert!(
            err.to_string().contains(&format!(
                "{} points to {}",
                link.display(),
                target.display()
            )),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_dangling_executable_link_names_the_missing_target() {
        let s = setup(Some(
            "[[agents]]\nname = \"dangling\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$EXE-link\"\n",
        ));
        let missing = s.bin.join("gone");
        std::os::unix::fs::symlink(&missing, s.bin.join(format!("{BUNDLED_AGENT}-link"))).unwrap();
        let reg = load(&s, &[]).unwrap();
        let err = reg.resolve(Some("dangling")).unwrap_err();
        assert_eq!(err.code(), "executable_not_found");
        assert!(
            err.to_string()
                .contains(&format!("a symbolic link to {}", missing.display())),
            "{err}"
        );
    }

    #[test]
    fn environment_agent_is_the_default_when_set() {
        let s = setup(None);
        let reg = load(
            &s,
            &[
                (VAR_EXECUTABLE, s.exe.display().to_string()),
                ("AWP_AGENT_CLI_PROTOCOL", "stream-json".into()),
            ],
        )
        .unwrap();
        check(&reg, &[(ENV_AGENT, Ok(())), (BUNDLED_AGENT, Ok(()))]);
        assert_eq!(reg.default_name(), ENV_AGENT);
        assert_eq!(
            reg.resolve(None).unwrap().protocol,
            AgentProtocol::StreamJson
        );
        let bad = load(&s, &[(VAR_EXECUTABLE, "relative/agent".into())]).unwrap();
        check(
            &bad,
            &[
                (ENV_AGENT, Err("executable_not_absolute")),
                (BUNDLED_AGENT, Ok(())),
            ],
        );
    }

    #[test]
    fn reserved_names_an_empty_executable_variable_and_the_remote_hint() {
        let s = setup(Some(
            r#"
[[agents]]
name = "env"
protocol = "awp-jsonl"
executable = "$EXE"
[[agents]]
name = "awp-agent"
protocol = "awp-jsonl"
executable = "$EXE"
[[agents]]
name = "remote"
protocol = "awp-jsonl"
executable = "$EXE"
args = ["--base", "https://api.example.com"]
"#,
        ));
        let reg = load(&s, &[(VAR_EXECUTABLE, String::new())]).unwrap();
        check(
            &reg,
            &[
                ("env", Err("agent_name_reserved")),
                ("awp-agent", Err("agent_name_reserved")),
                ("remote", Err("remote_url_not_allowed")),
                (BUNDLED_AGENT, Ok(())),
            ],
        );
        let message = |name: &str| {
            let entry = reg.entries().iter().find(|e| e.name == name).unwrap();
            entry.status.as_ref().unwrap_err().to_string()
        };
        assert!(message("env").contains("reserved"), "{}", message("env"));
        // The refused entry named awp-agent neither shadows the bundled agent nor counts as the default.
        assert_eq!(reg.default_name(), BUNDLED_AGENT);
        let defaults: Vec<(&str, AgentSource)> = reg
            .entries()
            .iter()
            .filter(|e| reg.is_default(e))
            .map(|e| (e.name.as_str(), e.source))
            .collect();
        assert_eq!(defaults, [(BUNDLED_AGENT, AgentSource::Bundled)]);
        assert_eq!(
            reg.resolve(Some(BUNDLED_AGENT))
                .map(|spec| spec.protocol)
                .map_err(|e| e.code()),
            Ok(AgentProtocol::AwpJsonl)
        );
        assert!(reg.resolve(None).is_ok());
        let remote = message("remote");
        assert!(remote.contains("remote_api_opt_in = true"), "{remote}");
        assert!(!remote.contains("AWP_AGENT"), "{remote}");
    }

    #[test]
    fn launch_messages_are_phrased_for_where_the_agent_is_defined() {
        let err = LaunchError::RemoteUrlInEnv {
            name: "BASE".to_owned(),
        };
        let text = |source| ConfigError::from_launch(&err, source).to_string();
        assert_eq!(
            text(AgentSource::Environment),
            "AWP_AGENT_CLI_ENV_JSON value of BASE holds a non-loopback URL; set AWP_AGENT_REMOTE_API_OPT_IN=1 to \
             allow it"
        );
        assert_eq!(
            text(AgentSource::ConfigFile),
            "env value of BASE holds a non-loopback URL; set remote_api_opt_in = true on the agent in agents.toml \
             to allow it"
        );
        let bundled = text(AgentSource::Bundled);
        assert!(
            bundled.contains("bundled agent cannot allow it") && !bundled.contains("AWP_AGENT"),
            "{bundled}"
        );
        assert_eq!(
            ConfigError::from_launch(&err, AgentSource::ConfigFile).code(),
            "remote_url_not_allowed"
        );
    }

    #[test]
    fn config_entries_are_validated_one_by_one() {
        let s = setup(Some(
            r#"
default = "good"
[[agents]]
name = "good"
protocol = "stream-json"
executable = "$EXE"
args = ["--x"]
env = { K = "v" }
model = "m"
[[agents]]
name = "acp-one"
protocol = "acp"
executable = "$EXE"
[[agents]]
name = "missing-exe"
protocol = "awp-jsonl"
executable = "/nonexistent/agent"
[[agents]]
name = "bad-proto"
protocol = "grpc"
executable = "$EXE"
[[agents]]
name = "remote"
protocol = "awp-jsonl"
executable = "$EXE"
env = { OPENAI_BASE_URL = "https://api.example.com" }
[[agents]]
name = "good"
protocol = "awp-jsonl"
executable = "$EXE"
[[agents]]
name = "typo"
protocol = "awp-jsonl"
executable = "$EXE"
modle = "x"
[[agents]]
name = "bad name!"
protocol = "awp-jsonl"
executable = "$EXE"
"#,
        ));
        let reg = load(&s, &[]).unwrap();
        check(
            &reg,
            &[
                ("good", Ok(())),
                ("acp-one", Ok(())),
                ("missing-exe", Err("executable_not_found")),
                ("bad-proto", Err("protocol_unknown")),
                ("remote", Err("remote_url_not_allowed")),
                ("good", Err("agent_name_duplicate")),
                ("typo", Err("agent_entry_invalid")),
                ("bad name!", Err("agent_name_invalid")),
                (BUNDLED_AGENT, Ok(())),
            ],
        );
        assert_eq!(reg.default_name(), "good");
        let good = reg.resolve(None).unwrap();
        assert_eq!(
            (good.protocol, good.launch.default_model.as_deref()),
            (AgentProtocol::StreamJson, Some("m"))
        );
        let missing = reg
            .entries()
            .iter()
            .find(|e| e.name == "missing-exe")
            .unwrap();
        let message = missing.status.as_ref().unwrap_err().to_string();
        // The message names the file and the position is the `executable` value's (line 17, after `executable = `).
        assert_eq!(
            message,
            "executable names a file that does not exist: /nonexistent/agent"
        );
        assert_eq!(missing.location, Some((17, 14)));
        assert!(
            !format!("{good:?}").contains("\"v\""),
            "Debug must not show env values"
        );
        assert_eq!(
            reg.resolve(Some("nope")).unwrap_err().code(),
            "agent_not_found"
        );
    }

    #[test]
    fn file_level_errors_fail_the_load() {
        let s = setup(Some("agents = 3"));
        assert_eq!(load(&s, &[]).unwrap_err().code(), "config_invalid");
        let s = setup(Some("# agents\n\ndefault = \"ghost\""));
        let err = load(&s, &[]).unwrap_err();
        assert_eq!(err.code(), "default_agent_unknown");
        let message = err.to_string();
        assert!(
            message.ends_with("agents.toml:3:11: default agent `ghost` is not configured"),
            "{message}"
        );
        assert!(
            message.starts_with(&s.config.display().to_string()),
            "{message}"
        );
        // Not UTF-8: the position of the first bad byte (line 2, after `é# ` = 3 characters).
        std::fs::write(s.config.join(CONFIG_FILE), b"# ok\n\xc3\xa9# \xff\n").unwrap();
        let err = load(&s, &[]).unwrap_err();
        assert_eq!(err.code(), "config_invalid");
        assert!(
            err.to_string()
                .ends_with("agents.toml:2:4: invalid: not UTF-8 text"),
            "{err}"
        );
        let s = setup(None);
        let big = "#".repeat(usize::try_from(MAX_CONFIG_BYTES).unwrap() + 1);
        std::fs::write(s.config.join(CONFIG_FILE), &big[..big.len() - 1]).unwrap();
        assert!(load(&s, &[]).is_ok(), "exactly at the limit loads");
        std::fs::write(s.config.join(CONFIG_FILE), big).unwrap();
        assert_eq!(load(&s, &[]).unwrap_err().code(), "config_too_large");
    }
}
