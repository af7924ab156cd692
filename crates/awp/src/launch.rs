//! The launch contract: `AWP_AGENT_CLI_*` variables → a validated [`LaunchConfig`] → an argv/env [`LaunchPlan`].
//!
//! Parsing ([`LaunchConfig::from_vars`]) and planning are pure; [`LaunchConfig::validate`] additionally reads the
//! executable's file metadata (no process is spawned here, see [`crate::session`]).
//! Source: AWP agent CLI protocol, "Launch contract"; `protocols/awp.md` "Launch".

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::SessionId;

/// `AWP_AGENT_CLI_EXECUTABLE`: absolute path to a regular, non-symlink, executable file.
pub const VAR_EXECUTABLE: &str = "AWP_AGENT_CLI_EXECUTABLE";
/// `AWP_AGENT_CLI_ARGS_JSON`: optional JSON array of exact prefix arguments, e.g. `["--verbose"]`.
pub const VAR_ARGS_JSON: &str = "AWP_AGENT_CLI_ARGS_JSON";
/// `AWP_AGENT_CLI_ENV_JSON`: optional JSON object of the only agent-specific child env entries, e.g. `{"K":"v"}`.
pub const VAR_ENV_JSON: &str = "AWP_AGENT_CLI_ENV_JSON";
/// `AWP_AGENT_CLI_PROTOCOL`: `awp-jsonl` (default when unset) or `stream-json`.
pub const VAR_PROTOCOL: &str = "AWP_AGENT_CLI_PROTOCOL";
/// `AWP_AGENT_DEFAULT_MODEL`: model id passed unchanged as `--model`.
pub const VAR_DEFAULT_MODEL: &str = "AWP_AGENT_DEFAULT_MODEL";
/// `AWP_AGENT_REMOTE_API_OPT_IN`: `1` allows non-loopback `http(s)://` URLs in args and env values; `0`/unset denies.
pub const VAR_REMOTE_API_OPT_IN: &str = "AWP_AGENT_REMOTE_API_OPT_IN";

/// Environment entries removed from the plan even when `AWP_AGENT_CLI_ENV_JSON` sets them.
///
/// `CLAUDECODE`: a nested Claude Code refuses to start when it is set (`protocols/awp.md` "Hazards").
pub const DROPPED_ENV: &[&str] = &["CLAUDECODE"];

/// Compatibility flags `stream-json` adds before `--model`, in this order.
pub const STREAM_JSON_FLAGS: &[&str] = &[
    "--output-format",
    "stream-json",
    "--input-format",
    "stream-json",
    "--print",
    "--verbose",
];

/// Which wire dialect the agent speaks. Wire/env form: `"awp-jsonl"` | `"stream-json"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Protocol {
    /// The AWP contract itself; raw streams may end a turn with a top-level `message_stop`.
    #[default]
    #[serde(rename = "awp-jsonl")]
    AwpJsonl,
    /// Claude Code's `--output-format stream-json --input-format stream-json --print --verbose`; turns end with `result` only.
    #[serde(rename = "stream-json")]
    StreamJson,
}

impl Protocol {
    /// The wire/env spelling: `awp-jsonl` or `stream-json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::AwpJsonl => "awp-jsonl",
            Protocol::StreamJson => "stream-json",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = LaunchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "awp-jsonl" => Ok(Protocol::AwpJsonl),
            "stream-json" => Ok(Protocol::StreamJson),
            _ => Err(LaunchError::UnknownProtocol),
        }
    }
}

/// One failed launch rule. Each variant names the variable it is about and never contains a value
/// (values may be secrets).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The executable path is not absolute.
    #[error("AWP_AGENT_CLI_EXECUTABLE must be an absolute path")]
    ExecutableNotAbsolute,
    /// Nothing exists at the executable path.
    #[error("AWP_AGENT_CLI_EXECUTABLE names a file that does not exist")]
    ExecutableNotFound,
    /// The executable's metadata could not be read (permission denied on a parent directory, …).
    #[error("AWP_AGENT_CLI_EXECUTABLE cannot be inspected ({kind})")]
    ExecutableUnreadable {
        /// The I/O error kind reported by the file system.
        kind: std::io::ErrorKind,
    },
    /// The executable path is a symbolic link.
    #[error("AWP_AGENT_CLI_EXECUTABLE must not be a symbolic link")]
    ExecutableIsSymlink,
    /// The executable path is a directory, socket, device, ….
    #[error("AWP_AGENT_CLI_EXECUTABLE must be a regular file")]
    ExecutableNotRegularFile,
    /// The file has no execute permission bit.
    #[error("AWP_AGENT_CLI_EXECUTABLE is not executable")]
    ExecutableNotExecutable,
    /// `AWP_AGENT_CLI_ARGS_JSON` is not valid JSON.
    #[error("AWP_AGENT_CLI_ARGS_JSON is not valid JSON (line {line}, column {column})")]
    ArgsNotJson {
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
    },
    /// `AWP_AGENT_CLI_ARGS_JSON` is JSON but not an array of strings.
    #[error("AWP_AGENT_CLI_ARGS_JSON must be a JSON array of strings")]
    ArgsNotArrayOfStrings,
    /// An argument contains a NUL byte, which no OS can pass in argv.
    #[error("AWP_AGENT_CLI_ARGS_JSON argument {index} contains a NUL character")]
    ArgContainsNul {
        /// 0-based index of the argument.
        index: usize,
    },
    /// `AWP_AGENT_CLI_ENV_JSON` is not valid JSON.
    #[error("AWP_AGENT_CLI_ENV_JSON is not valid JSON (line {line}, column {column})")]
    EnvNotJson {
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
    },
    /// `AWP_AGENT_CLI_ENV_JSON` is JSON but not an object whose values are all strings.
    #[error("AWP_AGENT_CLI_ENV_JSON must be a JSON object of string values")]
    EnvNotObjectOfStrings,
    /// An env name is empty or contains `=` or NUL.
    #[error("AWP_AGENT_CLI_ENV_JSON has an invalid variable name (entry {index})")]
    EnvInvalidName {
        /// 0-based index of the entry in sorted-name order.
        index: usize,
    },
    /// An env value contains a NUL byte.
    #[error("AWP_AGENT_CLI_ENV_JSON value of {name} contains a NUL character")]
    EnvValueContainsNul {
        /// The variable name (names are not secret; values may be).
        name: String,
    },
    /// `AWP_AGENT_CLI_PROTOCOL` is neither `awp-jsonl` nor `stream-json`.
    #[error("AWP_AGENT_CLI_PROTOCOL must be awp-jsonl or stream-json")]
    UnknownProtocol,
    /// `AWP_AGENT_DEFAULT_MODEL` (or the per-turn model) is empty or contains a control character.
    #[error("AWP_AGENT_DEFAULT_MODEL must be a non-empty model id without control characters")]
    InvalidModel,
    /// `AWP_AGENT_REMOTE_API_OPT_IN` is set to something other than `1` or `0`.
    #[error("AWP_AGENT_REMOTE_API_OPT_IN must be 1 or 0")]
    InvalidRemoteOptIn,
    /// A prefix argument holds a non-loopback `http(s)://` URL and remote access is not opted in.
    #[error(
        "AWP_AGENT_CLI_ARGS_JSON argument {index} holds a non-loopback URL; set AWP_AGENT_REMOTE_API_OPT_IN=1 to allow it"
    )]
    RemoteUrlInArgs {
        /// 0-based index of the argument.
        index: usize,
    },
    /// An env value holds a non-loopback `http(s)://` URL and remote access is not opted in.
    #[error(
        "AWP_AGENT_CLI_ENV_JSON value of {name} holds a non-loopback URL; set AWP_AGENT_REMOTE_API_OPT_IN=1 to allow it"
    )]
    RemoteUrlInEnv {
        /// The variable name.
        name: String,
    },
    /// The `--mcp-config` path is not valid UTF-8.
    #[error("mcp config path is not valid UTF-8")]
    McpConfigNotUtf8,
}

impl LaunchError {
    /// Stable snake_case code, for logs and process-boundary errors.
    pub fn code(&self) -> &'static str {
        match self {
            LaunchError::ExecutableNotAbsolute => "executable_not_absolute",
            LaunchError::ExecutableNotFound => "executable_not_found",
            LaunchError::ExecutableUnreadable { .. } => "executable_unreadable",
            LaunchError::ExecutableIsSymlink => "executable_is_symlink",
            LaunchError::ExecutableNotRegularFile => "executable_not_regular_file",
            LaunchError::ExecutableNotExecutable => "executable_not_executable",
            LaunchError::ArgsNotJson { .. } => "args_json_invalid",
            LaunchError::ArgsNotArrayOfStrings => "args_json_not_array_of_strings",
            LaunchError::ArgContainsNul { .. } => "arg_contains_nul",
            LaunchError::EnvNotJson { .. } => "env_json_invalid",
            LaunchError::EnvNotObjectOfStrings => "env_json_not_object_of_strings",
            LaunchError::EnvInvalidName { .. } => "env_invalid_name",
            LaunchError::EnvValueContainsNul { .. } => "env_value_contains_nul",
            LaunchError::UnknownProtocol => "protocol_unknown",
            LaunchError::InvalidModel => "model_invalid",
            LaunchError::InvalidRemoteOptIn => "remote_api_opt_in_invalid",
            LaunchError::RemoteUrlInArgs { .. } | LaunchError::RemoteUrlInEnv { .. } => {
                "remote_url_not_allowed"
            }
            LaunchError::McpConfigNotUtf8 => "mcp_config_path_not_utf8",
        }
    }

    /// The launch variable the error is about (`None` for per-launch inputs such as the MCP config path).
    pub fn variable(&self) -> Option<&'static str> {
        match self {
            LaunchError::ExecutableNotAbsolute
            | LaunchError::ExecutableNotFound
            | LaunchError::ExecutableUnreadable { .. }
            | LaunchError::ExecutableIsSymlink
            | LaunchError::ExecutableNotRegularFile
            | LaunchError::ExecutableNotExecutable => Some(VAR_EXECUTABLE),
            LaunchError::ArgsNotJson { .. }
            | LaunchError::ArgsNotArrayOfStrings
            | LaunchError::ArgContainsNul { .. }
            | LaunchError::RemoteUrlInArgs { .. } => Some(VAR_ARGS_JSON),
            LaunchError::EnvNotJson { .. }
            | LaunchError::EnvNotObjectOfStrings
            | LaunchError::EnvInvalidName { .. }
            | LaunchError::EnvValueContainsNul { .. }
            | LaunchError::RemoteUrlInEnv { .. } => Some(VAR_ENV_JSON),
            LaunchError::UnknownProtocol => Some(VAR_PROTOCOL),
            LaunchError::InvalidModel => Some(VAR_DEFAULT_MODEL),
            LaunchError::InvalidRemoteOptIn => Some(VAR_REMOTE_API_OPT_IN),
            LaunchError::McpConfigNotUtf8 => None,
        }
    }
}

/// A parsed launch configuration (one configured agent). `Debug` redacts env values.
#[derive(Clone, PartialEq, Eq)]
pub struct LaunchConfig {
    /// `AWP_AGENT_CLI_EXECUTABLE`.
    pub executable: PathBuf,
    /// `AWP_AGENT_CLI_ARGS_JSON` (empty when unset).
    pub prefix_args: Vec<String>,
    /// `AWP_AGENT_CLI_ENV_JSON` (empty when unset).
    pub env: BTreeMap<String, String>,
    /// `AWP_AGENT_CLI_PROTOCOL` (default `awp-jsonl`).
    pub protocol: Protocol,
    /// `AWP_AGENT_DEFAULT_MODEL` (`None` when unset or empty).
    pub default_model: Option<String>,
    /// `AWP_AGENT_REMOTE_API_OPT_IN == "1"`.
    pub remote_api_opt_in: bool,
}

impl fmt::Debug for LaunchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchConfig")
            .field("executable", &self.executable)
            .field("prefix_args", &self.prefix_args)
            .field(
                "env",
                &RedactedEnv(self.env.keys().map(String::as_str).collect()),
            )
            .field("protocol", &self.protocol)
            .field("default_model", &self.default_model)
            .field("remote_api_opt_in", &self.remote_api_opt_in)
            .finish()
    }
}

struct RedactedEnv<'a>(Vec<&'a str>);

impl fmt::Debug for RedactedEnv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|k| (k, "<redacted>")))
            .finish()
    }
}

impl LaunchConfig {
    /// A config for `executable` with no prefix args, no env, protocol `awp-jsonl`, no model, no remote opt-in.
    pub fn new(executable: impl Into<PathBuf>) -> Self {
        Self {
            executable: executable.into(),
            prefix_args: Vec::new(),
            env: BTreeMap::new(),
            protocol: Protocol::AwpJsonl,
            default_model: None,
            remote_api_opt_in: false,
        }
    }

    /// Reads the `AWP_AGENT_*` variables through `lookup` (e.g. `|k| std::env::var(k).ok()`).
    ///
    /// Returns `Ok(None)` when `AWP_AGENT_CLI_EXECUTABLE` is unset. Only parses and checks what needs no file
    /// system (JSON shapes, protocol, opt-in, model, URLs); call [`validate`](Self::validate) before spawning
    /// ([`plan`](Self::plan) does).
    ///
    /// # Errors
    /// The first failed rule as a [`LaunchError`], naming the variable.
    pub fn from_vars(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<LaunchConfig>, LaunchError> {
        let Some(executable) = lookup(VAR_EXECUTABLE) else {
            return Ok(None);
        };
        let prefix_args = match lookup(VAR_ARGS_JSON) {
            Some(json) if !json.trim().is_empty() => parse_args_json(&json)?,
            _ => Vec::new(),
        };
        let env = match lookup(VAR_ENV_JSON) {
            Some(json) if !json.trim().is_empty() => parse_env_json(&json)?,
            _ => BTreeMap::new(),
        };
        let protocol = match lookup(VAR_PROTOCOL) {
            Some(p) if !p.is_empty() => p.parse()?,
            _ => Protocol::AwpJsonl,
        };
        let default_model = match lookup(VAR_DEFAULT_MODEL) {
            Some(m) if !m.is_empty() => Some(m),
            _ => None,
        };
        let remote_api_opt_in = match lookup(VAR_REMOTE_API_OPT_IN).as_deref() {
            None | Some("" | "0") => false,
            Some("1") => true,
            Some(_) => return Err(LaunchError::InvalidRemoteOptIn),
        };
        let config = LaunchConfig {
            executable: PathBuf::from(executable),
            prefix_args,
            env,
            protocol,
            default_model,
            remote_api_opt_in,
        };
        config.validate_values()?;
        Ok(Some(config))
    }

    /// Checks every launch rule, including the executable's file metadata (absolute, exists, not a symlink,
    /// a regular file, executable by someone).
    ///
    /// # Errors
    /// The first failed rule as a [`LaunchError`].
    pub fn validate(&self) -> Result<(), LaunchError> {
        self.validate_values()?;
        validate_executable(&self.executable)
    }

    /// The pure rules: NULs, env names, model, remote URLs.
    fn validate_values(&self) -> Result<(), LaunchError> {
        if !self.executable.is_absolute() {
            return Err(LaunchError::ExecutableNotAbsolute);
        }
        for (index, arg) in self.prefix_args.iter().enumerate() {
            if arg.contains('\0') {
                return Err(LaunchError::ArgContainsNul { index });
            }
        }
        for (index, (name, value)) in self.env.iter().enumerate() {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(LaunchError::EnvInvalidName { index });
            }
            if value.contains('\0') {
                return Err(LaunchError::EnvValueContainsNul { name: name.clone() });
            }
        }
        if let Some(model) = &self.default_model {
            validate_model(model)?;
        }
        if !self.remote_api_opt_in {
            if let Some(index) = self.prefix_args.iter().position(|a| contains_remote_url(a)) {
                return Err(LaunchError::RemoteUrlInArgs { index });
            }
            if let Some((name, _)) = self.env.iter().find(|(_, v)| contains_remote_url(v)) {
                return Err(LaunchError::RemoteUrlInEnv { name: name.clone() });
            }
        }
        Ok(())
    }

    /// Builds the argv and env for one agent process, after [`validate`](Self::validate).
    ///
    /// argv: `<prefix args…> [--output-format stream-json --input-format stream-json --print --verbose]
    /// [--model <m>] [--resume <id>] [--mcp-config <path>]`. `model` overrides the default model; `--model` is
    /// omitted when neither is set. A value starting with `-` is passed as `--flag=<value>` so that the CLI cannot
    /// read it as a flag. Env: the `AWP_AGENT_CLI_ENV_JSON` entries minus [`DROPPED_ENV`]; the OS allowlist is
    /// added at spawn.
    ///
    /// # Errors
    /// Any [`LaunchError`] from [`validate`](Self::validate), [`LaunchError::InvalidModel`] for a bad `model`,
    /// [`LaunchError::McpConfigNotUtf8`].
    pub fn plan(
        &self,
        model: Option<&str>,
        resume: Option<&SessionId>,
        mcp_config: Option<&Path>,
    ) -> Result<LaunchPlan, LaunchError> {
        self.validate()?;
        self.plan_unchecked_executable(model, resume, mcp_config)
    }

    /// [`plan`](Self::plan) without the file-system checks of the executable (pure; for tests and dry runs).
    ///
    /// # Errors
    /// As [`plan`](Self::plan), minus the executable metadata rules.
    pub fn plan_unchecked_executable(
        &self,
        model: Option<&str>,
        resume: Option<&SessionId>,
        mcp_config: Option<&Path>,
    ) -> Result<LaunchPlan, LaunchError> {
        self.validate_values()?;
        let mut args = self.prefix_args.clone();
        if self.protocol == Protocol::StreamJson {
            args.extend(STREAM_JSON_FLAGS.iter().map(|s| (*s).to_owned()));
        }
        let model = match model {
            Some(m) => {
                validate_model(m)?;
                Some(m)
            }
            None => self.default_model.as_deref(),
        };
        if let Some(model) = model {
            push_flag(&mut args, "--model", model);
        }
        if let Some(id) = resume {
            push_flag(&mut args, "--resume", id.as_str());
        }
        if let Some(path) = mcp_config {
            let path = path.to_str().ok_or(LaunchError::McpConfigNotUtf8)?;
            push_flag(&mut args, "--mcp-config", path);
        }
        let env = self
            .env
            .iter()
            .filter(|(k, _)| !DROPPED_ENV.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(LaunchPlan {
            program: self.executable.clone(),
            args,
            env,
            protocol: self.protocol,
        })
    }
}

fn push_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    if value.starts_with('-') {
        args.push(format!("{flag}={value}"));
    } else {
        args.push(flag.to_owned());
        args.push(value.to_owned());
    }
}

fn validate_model(model: &str) -> Result<(), LaunchError> {
    if model.is_empty() || model.chars().any(char::is_control) {
        return Err(LaunchError::InvalidModel);
    }
    Ok(())
}

fn parse_args_json(json: &str) -> Result<Vec<String>, LaunchError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| LaunchError::ArgsNotJson {
            line: e.line(),
            column: e.column(),
        })?;
    let serde_json::Value::Array(items) = value else {
        return Err(LaunchError::ArgsNotArrayOfStrings);
    };
    items
        .into_iter()
        .map(|item| match item {
            serde_json::Value::String(s) => Ok(s),
            _ => Err(LaunchError::ArgsNotArrayOfStrings),
        })
        .collect()
}

fn parse_env_json(json: &str) -> Result<BTreeMap<String, String>, LaunchError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| LaunchError::EnvNotJson {
            line: e.line(),
            column: e.column(),
        })?;
    let serde_json::Value::Object(entries) = value else {
        return Err(LaunchError::EnvNotObjectOfStrings);
    };
    entries
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            _ => Err(LaunchError::EnvNotObjectOfStrings),
        })
        .collect()
}

fn validate_executable(path: &Path) -> Result<(), LaunchError> {
    if !path.is_absolute() {
        return Err(LaunchError::ExecutableNotAbsolute);
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LaunchError::ExecutableNotFound);
        }
        Err(e) => return Err(LaunchError::ExecutableUnreadable { kind: e.kind() }),
    };
    if meta.file_type().is_symlink() {
        return Err(LaunchError::ExecutableIsSymlink);
    }
    if !meta.is_file() {
        return Err(LaunchError::ExecutableNotRegularFile);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(LaunchError::ExecutableNotExecutable);
        }
    }
    Ok(())
}

/// True when `text` contains an `http://` or `https://` URL (any case) whose host is not loopback.
///
/// Loopback hosts: `localhost`, `127.0.0.0/8`, `[::1]`. Everything else — including hosts that cannot be
/// parsed — counts as remote (fail closed). Userinfo (`user@`) is skipped before the host is read.
pub fn contains_remote_url(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let mut rest = lower.as_str();
    while let Some(pos) = find_scheme(rest) {
        let (skip, after) = pos;
        let authority_start = &rest[skip..];
        let end = authority_start
            .find(|c: char| {
                matches!(
                    c,
                    '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '\\' | ',' | ';' | '`'
                ) || c.is_whitespace()
            })
            .unwrap_or(authority_start.len());
        let authority = &authority_start[..end];
        if !is_loopback_authority(authority) {
            return true;
        }
        rest = &rest[after..];
    }
    false
}

/// Finds the next `http://` / `https://`; returns (offset just after it, offset to continue scanning from).
fn find_scheme(s: &str) -> Option<(usize, usize)> {
    let http = s.find("http://").map(|p| (p, p + "http://".len()));
    let https = s.find("https://").map(|p| (p, p + "https://".len()));
    let (_, after) = match (http, https) {
        (Some(a), Some(b)) => {
            if a.0 <= b.0 {
                a
            } else {
                b
            }
        }
        (Some(a), None) => a,
        (None, Some(b)) => b,
        (None, None) => return None,
    };
    Some((after, after))
}

fn is_loopback_authority(authority: &str) -> bool {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(bracketed) = host_port.strip_prefix('[') {
        let Some((inner, _)) = bracketed.split_once(']') else {
            return false;
        };
        return inner.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    }
    let host = host_port.split_once(':').map_or(host_port, |(h, _)| h);
    let host = host.strip_suffix('.').unwrap_or(host);
    host == "localhost" || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// A ready-to-spawn agent command: what [`crate::session::AgentSession::spawn`] runs. `Debug` redacts env values.
#[derive(Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Absolute path of the executable (no shell, no `PATH` lookup).
    pub program: PathBuf,
    /// Arguments after the program name.
    pub args: Vec<String>,
    /// Agent-specific env entries; the spawner adds the OS allowlist (`agentwire_process::OS_ENV_ALLOWLIST`).
    pub env: Vec<(String, String)>,
    /// The dialect the agent speaks.
    pub protocol: Protocol,
}

impl fmt::Debug for LaunchPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchPlan")
            .field("program", &self.program)
            .field("args", &self.args)
            .field(
                "env",
                &RedactedEnv(self.env.iter().map(|(k, _)| k.as_str()).collect()),
            )
            .field("protocol", &self.protocol)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// Parses `pairs` (executable defaults to `/bin/agent`) and compares the outcome with `expect`.
    fn check(pairs: &[(&str, &str)], expect: Result<(), &str>) {
        let mut all = vec![(VAR_EXECUTABLE, "/bin/agent")];
        all.extend_from_slice(pairs);
        let got = LaunchConfig::from_vars(vars(&all))
            .map(|_| ())
            .map_err(|e| e.code());
        assert_eq!(got, expect, "vars {pairs:?}");
    }

    #[test]
    fn unset_executable_means_no_config() {
        assert_eq!(LaunchConfig::from_vars(vars(&[])), Ok(None));
    }

    #[test]
    fn each_rule_has_its_own_error() {
        check(&[], Ok(()));
        check(&[(VAR_EXECUTABLE, "agent")], Err("executable_not_absolute"));
        check(&[(VAR_ARGS_JSON, "[\"a\",")], Err("args_json_invalid"));
        check(
            &[(VAR_ARGS_JSON, "{\"a\":1}")],
            Err("args_json_not_array_of_strings"),
        );
        check(
            &[(VAR_ARGS_JSON, "[\"a\",1]")],
            Err("args_json_not_array_of_strings"),
        );
        check(
            &[(VAR_ARGS_JSON, "[\"a\\u0000\"]")],
            Err("arg_contains_nul"),
        );
        check(&[(VAR_ENV_JSON, "nope")], Err("env_json_invalid"));
        check(
            &[(VAR_ENV_JSON, "[\"a\"]")],
            Err("env_json_not_object_of_strings"),
        );
        check(
            &[(VAR_ENV_JSON, "{\"A\":1}")],
            Err("env_json_not_object_of_strings"),
        );
        check(
            &[(VAR_ENV_JSON, "{\"A=B\":\"x\"}")],
            Err("env_invalid_name"),
        );
        check(&[(VAR_ENV_JSON, "{\"\":\"x\"}")], Err("env_invalid_name"));
        check(
            &[(VAR_ENV_JSON, "{\"A\":\"x\\u0000\"}")],
            Err("env_value_contains_nul"),
        );
        check(&[(VAR_PROTOCOL, "acp")], Err("protocol_unknown"));
        check(&[(VAR_PROTOCOL, "stream-json")], Ok(()));
        check(&[(VAR_DEFAULT_MODEL, "m\n")], Err("model_invalid"));
        check(
            &[(VAR_REMOTE_API_OPT_IN, "yes")],
            Err("remote_api_opt_in_invalid"),
        );
        check(&[(VAR_REMOTE_API_OPT_IN, "1")], Ok(()));
        check(
            &[(VAR_ARGS_JSON, "[\"--base-url=https://api.example.com/v1\"]")],
            Err("remote_url_not_allowed"),
        );
        check(
            &[(
                VAR_ENV_JSON,
                "{\"OPENAI_BASE_URL\":\"http://10.0.0.1:8080\"}",
            )],
            Err("remote_url_not_allowed"),
        );
        check(
            &[
                (
                    VAR_ENV_JSON,
                    "{\"OPENAI_BASE_URL\":\"https://api.example.com\"}",
                ),
                (VAR_REMOTE_API_OPT_IN, "1"),
            ],
            Ok(()),
        );
        check(
            &[(
                VAR_ENV_JSON,
                "{\"OPENAI_BASE_URL\":\"http://127.0.0.1:8080/v1\"}",
            )],
            Ok(()),
        );
    }

    #[test]
    fn errors_name_the_variable_and_never_the_value() {
        let secret = "sk-very-secret";
        let cases = [
            (VAR_ARGS_JSON, format!("[\"{secret}\",")),
            (VAR_ARGS_JSON, format!("[\"https://{secret}.example.com\"]")),
            (
                VAR_ENV_JSON,
                format!("{{\"KEY\":\"https://{secret}.example.com\"}}"),
            ),
            (VAR_ENV_JSON, format!("{{\"KEY\":[\"{secret}\"]}}")),
            (VAR_PROTOCOL, secret.to_owned()),
            (VAR_REMOTE_API_OPT_IN, secret.to_owned()),
        ];
        for (var, value) in cases {
            let err =
                LaunchConfig::from_vars(vars(&[(VAR_EXECUTABLE, "/bin/agent"), (var, &value)]))
                    .unwrap_err();
            let text = format!("{err} {err:?}");
            assert!(text.contains(var), "{text}");
            assert!(!text.contains(secret), "{text}");
            assert_eq!(err.variable(), Some(var));
        }
    }

    #[test]
    fn remote_url_detection() {
        let cases = [
            ("no url here", false),
            ("http://localhost:8080/v1", false),
            ("HTTP://LOCALHOST", false),
            ("https://127.0.0.1", false),
            ("http://127.1.2.3:9/x", false),
            ("http://[::1]:8080/", false),
            ("http://user:pw@localhost/", false),
            ("http://localhost./", false),
            ("x=http://localhost,y=http://localhost", false),
            ("https://api.openai.com/v1", true),
            ("http://localhost@evil.example/", true),
            ("http://127.0.0.1.evil.example/", true),
            ("http://0.0.0.0:80", true),
            ("http://[::2]/", true),
            ("http://[::1", true),
            ("http://", true),
            ("first http://localhost then https://remote.example", true),
            ("ws://remote.example", false),
        ];
        for (text, remote) in cases {
            assert_eq!(contains_remote_url(text), remote, "{text}");
        }
    }

    fn config(protocol: Protocol) -> LaunchConfig {
        let mut c = LaunchConfig::new("/opt/agent");
        c.prefix_args = vec!["--fast".into()];
        c.protocol = protocol;
        c.default_model = Some("default-model".into());
        c.env.insert("OPENAI_API_KEY".into(), "sk-secret".into());
        c.env.insert("CLAUDECODE".into(), "1".into());
        c
    }

    #[test]
    fn plan_builds_argv_in_contract_order() {
        let id = SessionId::new("abc").unwrap();
        let plan = config(Protocol::StreamJson)
            .plan_unchecked_executable(None, Some(&id), Some(Path::new("/tmp/mcp.json")))
            .unwrap();
        assert_eq!(
            plan.args,
            [
                "--fast",
                "--output-format",
                "stream-json",
                "--input-format",
                "stream-json",
                "--print",
                "--verbose",
                "--model",
                "default-model",
                "--resume",
                "abc",
                "--mcp-config",
                "/tmp/mcp.json"
            ]
        );
        let plan = config(Protocol::AwpJsonl)
            .plan_unchecked_executable(Some("other"), None, None)
            .unwrap();
        assert_eq!(plan.args, ["--fast", "--model", "other"]);
    }

    #[test]
    fn dash_leading_values_use_the_equals_form() {
        let id = SessionId::new("-rf").unwrap();
        let plan = config(Protocol::AwpJsonl)
            .plan_unchecked_executable(Some("-m"), Some(&id), None)
            .unwrap();
        assert_eq!(plan.args, ["--fast", "--model=-m", "--resume=-rf"]);
    }

    #[test]
    fn plan_env_drops_claudecode_and_debug_redacts_values() {
        let plan = config(Protocol::AwpJsonl)
            .plan_unchecked_executable(None, None, None)
            .unwrap();
        assert_eq!(
            plan.env,
            [("OPENAI_API_KEY".to_owned(), "sk-secret".to_owned())]
        );
        let debug = format!("{plan:?} {:?}", config(Protocol::AwpJsonl));
        assert!(!debug.contains("sk-secret"), "{debug}");
        assert!(debug.contains("OPENAI_API_KEY"), "{debug}");
    }

    #[test]
    fn plan_without_any_model_omits_the_flag() {
        let mut c = config(Protocol::AwpJsonl);
        c.default_model = None;
        assert_eq!(
            c.plan_unchecked_executable(None, None, None).unwrap().args,
            ["--fast"]
        );
        assert_eq!(
            c.plan_unchecked_executable(Some(""), None, None)
                .unwrap_err()
                .code(),
            "model_invalid"
        );
    }

    #[cfg(unix)]
    #[test]
    fn executable_file_rules() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("agent");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let check_path = |path: &Path, expect: Result<(), &str>| {
            let got = LaunchConfig::new(path).validate().map_err(|e| e.code());
            assert_eq!(got, expect, "{}", path.display());
        };
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
        check_path(&exe, Err("executable_not_executable"));
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_path(&exe, Ok(()));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&exe, &link).unwrap();
        check_path(&link, Err("executable_is_symlink"));
        check_path(dir.path(), Err("executable_not_regular_file"));
        check_path(&dir.path().join("missing"), Err("executable_not_found"));
        check_path(Path::new("relative/agent"), Err("executable_not_absolute"));
        let plan = LaunchConfig::new(&link).plan(None, None, None);
        assert_eq!(plan.unwrap_err().code(), "executable_is_symlink");
    }
}
