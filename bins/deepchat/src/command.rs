//! The command grammar `deepchat <domain> <verb> [options]` and its mapping to a method call.
//!
//! Source: DeepChat `src/shared/contracts/cliCommands.ts` (command registry: domains, verbs, timeout
//! classes) and `src/cli/args.ts` (options, defaults, usage rules). Global flags (`--json`, `--jsonl`,
//! `--timeout`, `--help`) are accepted only after the verb; `deepchat help` is the only one-token command.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::{Map, Value, json};

/// `DEEPCHAT_CLI_OUTPUT`: `text`, `json` or `jsonl`.
pub const OUTPUT_ENV: &str = "DEEPCHAT_CLI_OUTPUT";
/// `DEEPCHAT_CLI_TIMEOUT_MS`: default request timeout in milliseconds.
pub const TIMEOUT_ENV: &str = "DEEPCHAT_CLI_TIMEOUT_MS";
/// Timeout of standard commands (30 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of long-running commands (30 min), also the largest accepted timeout.
pub const LONG_RUNNING_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Timeout of mutations that may wait for a renderer approval (10 min).
pub const MUTATION_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Largest `--timeout`, milliseconds (`LOCAL_CONTROL_MAX_REQUEST_TIMEOUT_MS`).
pub const MAX_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// Human text on stdout, errors on stderr.
    Text,
    /// Exactly one response envelope on stdout.
    Json,
    /// Stream records, then one terminal envelope, on stdout.
    Jsonl,
}

/// A usage error: exit 2, `invalid_request`, printed in `mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    /// What is wrong.
    pub message: String,
    /// The output mode to report it in (inferred as DeepChat's `inferCliOutputMode` does).
    pub mode: OutputMode,
}

/// Default-timeout class of a command (`CliCommandTimeoutClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutClass {
    /// 30 s.
    Standard,
    /// 30 min.
    LongRunning,
    /// 10 min.
    ApprovedMutation,
}

impl TimeoutClass {
    fn default_timeout(self) -> Duration {
        match self {
            TimeoutClass::Standard => DEFAULT_TIMEOUT,
            TimeoutClass::LongRunning => LONG_RUNNING_TIMEOUT,
            TimeoutClass::ApprovedMutation => MUTATION_TIMEOUT,
        }
    }
}

/// How the call travels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// `POST /v1/rpc`.
    Rpc,
    /// `POST /v1/stream` (`run watch`).
    Stream,
    /// `POST /v1/stream` of a compute method (`model invoke`, `image|video generate`, `audio speak`).
    ComputeStream,
    /// `POST /v1/upload` of the file at `path` (at most `max_bytes`), params in the upload header.
    Upload {
        /// The file to send.
        path: PathBuf,
        /// Largest accepted size in bytes (checked before sending; the server checks again).
        max_bytes: u64,
    },
    /// `artifacts.describe`, then `GET /v1/artifacts/:id` published to `out`.
    Download {
        /// `--out`.
        out: PathBuf,
        /// `--overwrite`.
        overwrite: bool,
    },
}

/// How `--stdin` is read and placed (DeepChat `src/cli/run.ts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinFormat {
    /// UTF-8 text as is, at most 4 MiB.
    Text,
    /// An API key: at most 64 KiB (`PROVIDER_CREDENTIAL_MAX_BYTES`), one trailing `\n` or `\r\n` dropped.
    Credential,
    /// A JSON object (`models.setPublicConfig`'s `config`), at most 4 MiB.
    JsonObject,
}

impl StdinFormat {
    /// How `--stdin` of `method` is read (DeepChat `runCli` decides by contract name too).
    pub fn of(method: &str) -> StdinFormat {
        match method {
            "providers.setCredential" => StdinFormat::Credential,
            "models.setPublicConfig" => StdinFormat::JsonObject,
            _ => StdinFormat::Text,
        }
    }
}

/// One parsed command, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// `domain verb`, e.g. `run get`.
    pub command: &'static str,
    /// Wire method.
    pub method: &'static str,
    /// Params (before stdin is merged in).
    pub params: Value,
    /// Params field that receives stdin (`--stdin`), if any; how it is read is [`StdinFormat::of`] the method.
    pub stdin_field: Option<&'static str>,
    /// Transport.
    pub operation: Operation,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Print this help text (exit 0).
    Help(String),
    /// Call a method.
    Call {
        /// The call.
        invocation: Invocation,
        /// Output mode.
        mode: OutputMode,
        /// Overall timeout.
        timeout: Duration,
    },
}

/// `deepchat` command line (clap derive).
#[derive(Debug, Parser)]
#[command(
    name = "deepchat",
    bin_name = "deepchat",
    about = "Thin client of the local control plane (DeepChat CLI compatible)",
    disable_help_subcommand = true,
    disable_version_flag = true
)]
struct Cli {
    #[command(subcommand)]
    domain: Domain,
}

#[derive(Debug, Subcommand)]
enum Domain {
    /// List every command.
    Help,
    /// Diagnostics of the local control plane.
    #[command(subcommand, disable_help_subcommand = true)]
    System(SystemVerb),
    /// Start agent runs.
    #[command(subcommand, disable_help_subcommand = true)]
    Agent(AgentVerb),
    /// Inspect, watch and cancel runs.
    #[command(subcommand, disable_help_subcommand = true)]
    Run(RunVerb),
    /// Owned output artifacts.
    #[command(subcommand, disable_help_subcommand = true)]
    Artifact(ArtifactVerb),
    /// Allowlisted public settings.
    #[command(subcommand, disable_help_subcommand = true)]
    Settings(SettingsVerb),
    /// Threads (agentwire; DeepChat has no equivalent).
    #[command(subcommand, disable_help_subcommand = true)]
    Thread(ThreadVerb),
    /// Pending approvals (agentwire; read-only).
    #[command(subcommand, disable_help_subcommand = true)]
    Approval(ApprovalVerb),
    /// Providers: list, test, add, update, credentials, remove.
    #[command(subcommand, disable_help_subcommand = true)]
    Provider(crate::providers::ProviderVerb),
    /// Models: list and invoke; enable, disable, public configuration.
    #[command(subcommand, disable_help_subcommand = true)]
    Model(crate::compute::ModelVerb),
    /// Image generation.
    #[command(subcommand, disable_help_subcommand = true)]
    Image(crate::compute::ImageVerb),
    /// Video generation.
    #[command(subcommand, disable_help_subcommand = true)]
    Video(crate::compute::VideoVerb),
    /// Speech and transcription.
    #[command(subcommand, disable_help_subcommand = true)]
    Audio(crate::compute::AudioVerb),
    /// Offline OCR.
    #[command(subcommand, disable_help_subcommand = true)]
    Ocr(crate::ocr::OcrVerb),
}

/// Flags valid after every verb.
#[derive(Debug, Args)]
pub(crate) struct Globals {
    /// Print exactly one JSON response envelope.
    #[arg(long, conflicts_with = "jsonl")]
    json: bool,
    /// Print JSON Lines: stream records, then one terminal envelope.
    #[arg(long)]
    jsonl: bool,
    /// Request timeout in milliseconds (1..=1800000).
    #[arg(long, value_name = "MS")]
    timeout: Option<String>,
}

#[derive(Debug, Subcommand)]
enum SystemVerb {
    /// Show local control-plane status (cli.status).
    Status(NoOptions),
    /// Show app and protocol versions (cli.version).
    Version(NoOptions),
    /// List the exposed CLI surface (cli.capabilities).
    Capabilities(NoOptions),
    /// Run local transport diagnostics (cli.doctor).
    Doctor(NoOptions),
}

#[derive(Debug, Args)]
pub(crate) struct NoOptions {
    #[command(flatten)]
    pub(crate) globals: Globals,
}

#[derive(Debug, Subcommand)]
enum AgentVerb {
    /// Start a durable detached agent run and print its run id (sessions.runDetached).
    Run(AgentRunArgs),
}

#[derive(Debug, Args)]
struct AgentRunArgs {
    /// The prompt text.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        required_unless_present = "stdin",
        conflicts_with = "stdin"
    )]
    prompt: Option<String>,
    /// Read the prompt from standard input (≤ 4 MiB).
    #[arg(long)]
    stdin: bool,
    /// Agent name (DeepChat agentId).
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// Provider id.
    #[arg(long, value_name = "ID")]
    provider: Option<String>,
    /// Model passed to the agent (DeepChat modelId).
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// Override the agent system prompt.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    system: Option<String>,
    /// Durable thread title.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    title: Option<String>,
    /// Agent working directory.
    #[arg(long, value_name = "PATH")]
    project_dir: Option<String>,
    /// Activate skills (comma-separated ids).
    #[arg(long, value_name = "ID,ID")]
    skills: Option<String>,
    /// Disable agent tools (comma-separated ids).
    #[arg(long, value_name = "ID,ID")]
    disable_tools: Option<String>,
    /// Limit provider rounds (1..=100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    max_turns: Option<u32>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
enum RunVerb {
    /// Read a run snapshot and a page of its messages (runs.get).
    Get(RunPageArgs),
    /// Stream the run's events until it ends (events.subscribe).
    Watch(RunPageArgs),
    /// Request cancellation of a run (runs.cancel).
    Cancel(RunIdArgs),
}

#[derive(Debug, Args)]
struct RunPageArgs {
    /// Run id.
    #[arg(long, value_name = "RUN_ID")]
    run: String,
    /// get: a JSON message cursor `{"orderSeq":N,"id":"…"}`; watch: an event cursor `epoch:offset`.
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
    /// Messages per page (1..=100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    limit: Option<u32>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
struct RunIdArgs {
    /// Run id.
    #[arg(long, value_name = "RUN_ID")]
    run: String,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
enum ArtifactVerb {
    /// Show owned artifact metadata (artifacts.describe).
    Describe(ArtifactIdArgs),
    /// Download an owned artifact to --out without overwriting (human callers only).
    Get(ArtifactGetArgs),
    /// Delete an owned artifact (artifacts.delete).
    Delete(ArtifactIdArgs),
}

#[derive(Debug, Args)]
struct ArtifactIdArgs {
    /// Artifact id.
    #[arg(long, value_name = "ARTIFACT_ID")]
    id: String,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
struct ArtifactGetArgs {
    /// Artifact id.
    #[arg(long, value_name = "ARTIFACT_ID")]
    id: String,
    /// Where to publish the bytes (a temp file beside it is linked into place).
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
    /// Replace an existing file at --out.
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
enum SettingsVerb {
    /// Read allowlisted public settings (settings.getPublic).
    Get(SettingsGetArgs),
    /// Update one allowlisted public setting (settings.updatePublic; may need approval).
    Set(SettingsSetArgs),
}

#[derive(Debug, Args)]
struct SettingsGetArgs {
    /// Keys to read (comma-separated); all when absent.
    #[arg(long, value_name = "KEY,KEY")]
    keys: Option<String>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
struct SettingsSetArgs {
    /// Setting key.
    #[arg(long, value_name = "KEY")]
    key: String,
    /// New value: a JSON scalar (`true`, `2`, `"text"`) or bare text.
    #[arg(long, value_name = "JSON_SCALAR", allow_hyphen_values = true)]
    value: String,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
enum ThreadVerb {
    /// List threads, newest first (threads.list).
    List(ThreadListArgs),
    /// Show a thread and a page of its messages (threads.get).
    Show(ThreadShowArgs),
}

#[derive(Debug, Args)]
struct ThreadListArgs {
    /// Threads per page (1..=100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    limit: Option<u32>,
    /// Only threads of this agent.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// Cursor from a previous page.
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
struct ThreadShowArgs {
    /// Thread id.
    #[arg(long, value_name = "THREAD_ID")]
    thread: String,
    /// A JSON message cursor `{"orderSeq":N,"id":"…"}`.
    #[arg(long, value_name = "JSON")]
    cursor: Option<String>,
    /// Messages per page (1..=100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    limit: Option<u32>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
enum ApprovalVerb {
    /// List pending approvals (approvals.listPending); resolving happens only in the approvals console.
    List(NoOptions),
}

/// Top-level help (`deepchat help`).
pub fn top_help() -> String {
    let mut lines = vec![
        "Usage: deepchat <domain> <verb> [options]",
        "",
        "Commands:",
        "  system status        Show local control-plane status",
        "  system version       Show app and protocol versions",
        "  system capabilities  List the exposed CLI surface",
        "  system doctor        Run local transport diagnostics",
        "  agent run            Start a durable detached agent run",
        "  run get              Read a run snapshot and its messages",
        "  run watch            Stream the run's events",
        "  run cancel           Request cancellation of a run",
        "  artifact describe    Show owned artifact metadata",
        "  artifact get         Download an owned artifact (--out, no overwrite)",
        "  artifact delete      Delete an owned artifact",
        "  settings get         Read allowlisted public settings",
        "  settings set         Update one allowlisted public setting",
        "  thread list          List threads",
        "  thread show          Show a thread and its messages",
        "  approval list        List pending approvals",
    ];
    lines.extend_from_slice(crate::providers::HELP_LINES);
    lines.extend_from_slice(&[
        "  model list           List models (all providers, or --provider)",
        "  model invoke         Invoke a model once, streaming its answer",
        "  image generate       Generate images into owned artifacts",
        "  video generate       Generate a video into an owned artifact",
        "  audio speak          Speak text into an owned audio artifact",
        "  audio transcribe     Transcribe a local file (--file) or an owned artifact (--artifact)",
        "  ocr status           Show offline OCR runtime and cache status",
        "  ocr extract          Extract text from an image or PDF",
        "  ocr clear-cache      Clear derived OCR cache entries",
        "",
        "Global flags (after the verb): --json | --jsonl, --timeout <ms>, --help",
        "Environment: DEEPCHAT_CLI_OUTPUT=text|json|jsonl, DEEPCHAT_CLI_TIMEOUT_MS=<ms>",
        "Exit codes: 0 ok, 2 usage, 3 unavailable, 4 auth, 5 approval, 6 domain, 7 timeout/cancel, 8 internal",
    ]);
    lines.join("\n")
}

fn parse_output_env(value: Option<&str>) -> Result<OutputMode, String> {
    match value.map(str::trim).map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("text") => Ok(OutputMode::Text),
        Some("json") => Ok(OutputMode::Json),
        Some("jsonl") => Ok(OutputMode::Jsonl),
        Some(_) => Err(format!("{OUTPUT_ENV} must be text, json, or jsonl")),
    }
}

/// The output mode a usage error is reported in: text unless the first two words are a command (not flags),
/// then `--json`/`--jsonl` after them, else `DEEPCHAT_CLI_OUTPUT` (DeepChat `inferCliOutputMode`).
pub fn infer_mode(argv: &[String], env: &dyn Fn(&str) -> Option<String>) -> OutputMode {
    let command = argv.len() >= 2 && !argv[0].starts_with('-') && !argv[1].starts_with('-');
    if !command {
        return OutputMode::Text;
    }
    for arg in &argv[2..] {
        match arg.as_str() {
            "--json" => return OutputMode::Json,
            "--jsonl" => return OutputMode::Jsonl,
            _ => {}
        }
    }
    parse_output_env(env(OUTPUT_ENV).as_deref()).unwrap_or(OutputMode::Text)
}

fn parse_timeout(value: &str, source: &str) -> Result<Duration, String> {
    let valid =
        !value.is_empty() && !value.starts_with('0') && value.bytes().all(|b| b.is_ascii_digit());
    if !valid {
        return Err(format!(
            "{source} must be a positive integer in milliseconds"
        ));
    }
    match value.parse::<u64>() {
        Ok(ms) if ms <= MAX_TIMEOUT_MS => Ok(Duration::from_millis(ms)),
        _ => Err(format!("{source} must not exceed {MAX_TIMEOUT_MS}")),
    }
}

/// A free-text value may start with `-`, but not with `--` (that is a missing value followed by a flag).
fn text_value(name: &str, value: Option<String>) -> Result<Option<String>, String> {
    match value {
        Some(v) if v.starts_with("--") => Err(format!("missing value for --{name}")),
        other => Ok(other),
    }
}

fn identifier_list(value: &str, source: &str) -> Result<Vec<String>, String> {
    let items: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if items.is_empty() {
        return Err(format!("{source} must contain at least one identifier"));
    }
    if items.len() > 128 {
        return Err(format!("{source} accepts at most 128 identifiers"));
    }
    let unique: std::collections::HashSet<&String> = items.iter().collect();
    if unique.len() != items.len() {
        return Err(format!("{source} must not contain duplicate identifiers"));
    }
    Ok(items)
}

/// `--value` of `settings set`: `true`/`false`/`null`/a JSON number/a JSON string literal are parsed as JSON,
/// anything else is the bare text (DeepChat `settingValueOption`).
pub fn setting_value(value: &str) -> Result<Value, String> {
    let looks_json = matches!(value, "true" | "false" | "null")
        || value.starts_with('"')
        || is_json_number(value);
    if !looks_json {
        return Ok(Value::String(value.to_owned()));
    }
    let parsed: Value =
        serde_json::from_str(value).map_err(|_| "--value contains invalid JSON".to_owned())?;
    if parsed.is_object() || parsed.is_array() {
        return Err("--value must be a JSON scalar".to_owned());
    }
    Ok(parsed)
}

fn is_json_number(value: &str) -> bool {
    let body = value.strip_prefix('-').unwrap_or(value);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let int_ok = int == "0" || (digits(int) && !int.starts_with('0'));
    let frac_ok = frac.is_none_or(digits);
    let exp_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    int_ok && frac_ok && exp_ok
}

fn message_cursor(value: &str) -> Result<Value, String> {
    let parsed: Value = serde_json::from_str(value)
        .map_err(|_| "--cursor must be a JSON message cursor".to_owned())?;
    let ok = parsed.get("orderSeq").is_some_and(Value::is_i64)
        && parsed
            .get("id")
            .and_then(Value::as_str)
            .is_some_and(|id| !id.is_empty());
    if ok {
        Ok(json!({"orderSeq": parsed["orderSeq"], "id": parsed["id"]}))
    } else {
        Err("--cursor must be a JSON message cursor".to_owned())
    }
}

fn insert_some(params: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        params.insert(key.to_owned(), v.into());
    }
}

/// Parses `argv` (without the program name).
///
/// # Errors
/// A [`UsageError`] for anything DeepChat's CLI refuses as usage (exit 2).
pub fn parse(argv: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Parsed, UsageError> {
    let usage = |message: String| UsageError {
        message,
        mode: infer_mode(argv, env),
    };
    if argv.first().map(String::as_str) == Some("help") {
        if argv.len() != 1 {
            return Err(usage("expected: deepchat help".to_owned()));
        }
        return Ok(Parsed::Help(top_help()));
    }
    // Two leading words, neither a flag: `deepchat --json x y` and `deepchat x --help` are usage errors.
    let two_words = argv.len() >= 2 && !argv[0].starts_with('-') && !argv[1].starts_with('-');
    if !two_words {
        return Err(usage(
            "expected: deepchat <domain> <verb> [options]".to_owned(),
        ));
    }
    let cli = match Cli::try_parse_from(
        std::iter::once("deepchat".to_owned()).chain(join_hyphen_values(argv)),
    ) {
        Ok(cli) => cli,
        Err(error) if error.kind() == clap::error::ErrorKind::DisplayHelp => {
            return Ok(Parsed::Help(error.render().to_string()));
        }
        Err(error) => {
            // clap's message, up to its usage block: the first line alone can end in a colon with the names
            // (e.g. of missing required arguments) on the lines after it.
            let text = error.render().to_string();
            let message = text
                .lines()
                .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more"))
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let message = message.trim_start_matches("error: ");
            let message = if message.is_empty() {
                "invalid arguments"
            } else {
                message
            };
            return Err(usage(message.to_owned()));
        }
    };
    build(cli, env).map_err(usage)
}

/// DeepChat's option-value rule (`src/cli/args.ts` `readOptionValue`): the word after an option that takes a value
/// is its value unless it starts with `--`, so ids starting with a single `-` (base64url ids: 1 in 64) pass as
/// `--id -abc`. clap would read `-abc` as short flags; this joins such pairs into `--id=-abc` for every option of the
/// chosen verb that takes a value, and leaves everything else (flags, `--` values, words after `--`) as it is.
fn join_hyphen_values(argv: &[String]) -> Vec<String> {
    use clap::CommandFactory as _;
    let root = Cli::command();
    let mut current = &root;
    let mut joined = Vec::with_capacity(argv.len());
    let mut index = 0;
    while let Some(token) = argv.get(index) {
        index += 1;
        if token == "--" {
            joined.extend(argv[index - 1..].iter().cloned());
            break;
        }
        if let Some(name) = token.strip_prefix("--") {
            let takes_value = !name.contains('=')
                && current
                    .get_arguments()
                    .any(|arg| arg.get_long() == Some(name) && arg.get_action().takes_values());
            if let Some(next) = argv.get(index)
                && takes_value
                && next.len() > 1
                && next.starts_with('-')
                && !next.starts_with("--")
            {
                joined.push(format!("{token}={next}"));
                index += 1;
                continue;
            }
        } else if !token.starts_with('-')
            && let Some(sub) = current.find_subcommand(token)
        {
            current = sub;
        }
        joined.push(token.clone());
    }
    joined
}

fn build(cli: Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<Parsed, String> {
    use TimeoutClass::{ApprovedMutation, LongRunning, Standard};
    let (globals, invocation, class) = match cli.domain {
        Domain::Help => return Ok(Parsed::Help(top_help())),
        Domain::System(verb) => {
            let (globals, command, method) = match verb {
                SystemVerb::Status(o) => (o.globals, "system status", "cli.status"),
                SystemVerb::Version(o) => (o.globals, "system version", "cli.version"),
                SystemVerb::Capabilities(o) => {
                    (o.globals, "system capabilities", "cli.capabilities")
                }
                SystemVerb::Doctor(o) => (o.globals, "system doctor", "cli.doctor"),
            };
            (globals, rpc(command, method, json!({})), Standard)
        }
        Domain::Agent(AgentVerb::Run(a)) => {
            let mut params = Map::new();
            insert_some(&mut params, "prompt", text_value("prompt", a.prompt)?);
            insert_some(&mut params, "agentId", a.agent);
            insert_some(&mut params, "title", text_value("title", a.title)?);
            insert_some(&mut params, "projectDir", a.project_dir);
            insert_some(&mut params, "providerId", a.provider);
            insert_some(&mut params, "modelId", a.model);
            insert_some(&mut params, "systemPrompt", text_value("system", a.system)?);
            if let Some(v) = a.skills {
                params.insert(
                    "activeSkills".into(),
                    identifier_list(&v, "--skills")?.into(),
                );
            }
            if let Some(v) = a.disable_tools {
                let list = identifier_list(&v, "--disable-tools")?;
                params.insert("disabledAgentTools".into(), list.into());
            }
            insert_some(&mut params, "maxTurns", a.max_turns);
            let mut invocation = rpc("agent run", "sessions.runDetached", Value::Object(params));
            if a.stdin {
                invocation.stdin_field = Some("prompt");
            }
            (a.globals, invocation, LongRunning)
        }
        Domain::Run(RunVerb::Get(a)) => {
            let mut params = Map::new();
            params.insert("runId".into(), a.run.into());
            if let Some(c) = a.cursor {
                params.insert("cursor".into(), message_cursor(&c)?);
            }
            insert_some(&mut params, "limit", a.limit);
            (
                a.globals,
                rpc("run get", "runs.get", Value::Object(params)),
                Standard,
            )
        }
        Domain::Run(RunVerb::Watch(a)) => {
            let mut params = Map::new();
            params.insert("runId".into(), a.run.into());
            insert_some(&mut params, "cursor", a.cursor);
            insert_some(&mut params, "messageLimit", a.limit);
            let mut invocation = rpc("run watch", "events.subscribe", Value::Object(params));
            invocation.operation = Operation::Stream;
            (a.globals, invocation, LongRunning)
        }
        Domain::Run(RunVerb::Cancel(a)) => (
            a.globals,
            rpc("run cancel", "runs.cancel", json!({"runId": a.run})),
            Standard,
        ),
        Domain::Artifact(ArtifactVerb::Describe(a)) => (
            a.globals,
            rpc(
                "artifact describe",
                "artifacts.describe",
                json!({"id": a.id}),
            ),
            Standard,
        ),
        Domain::Artifact(ArtifactVerb::Get(a)) => {
            let mut invocation = rpc("artifact get", "artifacts.describe", json!({"id": a.id}));
            invocation.operation = Operation::Download {
                out: a.out,
                overwrite: a.overwrite,
            };
            (a.globals, invocation, LongRunning)
        }
        Domain::Artifact(ArtifactVerb::Delete(a)) => (
            a.globals,
            rpc("artifact delete", "artifacts.delete", json!({"id": a.id})),
            Standard,
        ),
        Domain::Settings(SettingsVerb::Get(a)) => {
            let params = match a.keys {
                Some(keys) => {
                    let keys: Vec<&str> = keys
                        .split(',')
                        .map(str::trim)
                        .filter(|k| !k.is_empty())
                        .collect();
                    if keys.is_empty() {
                        return Err("--keys must contain at least one setting key".to_owned());
                    }
                    json!({ "keys": keys })
                }
                None => json!({}),
            };
            (
                a.globals,
                rpc("settings get", "settings.getPublic", params),
                Standard,
            )
        }
        Domain::Settings(SettingsVerb::Set(a)) => {
            let value = setting_value(&a.value)?;
            let params = json!({"changes": [{"key": a.key, "value": value}]});
            (
                a.globals,
                rpc("settings set", "settings.updatePublic", params),
                ApprovedMutation,
            )
        }
        Domain::Thread(ThreadVerb::List(a)) => {
            let mut params = Map::new();
            insert_some(&mut params, "limit", a.limit);
            insert_some(&mut params, "agentId", a.agent);
            insert_some(&mut params, "cursor", a.cursor);
            (
                a.globals,
                rpc("thread list", "threads.list", Value::Object(params)),
                Standard,
            )
        }
        Domain::Thread(ThreadVerb::Show(a)) => {
            let mut params = Map::new();
            params.insert("threadId".into(), a.thread.into());
            if let Some(c) = a.cursor {
                params.insert("cursor".into(), message_cursor(&c)?);
            }
            insert_some(&mut params, "limit", a.limit);
            (
                a.globals,
                rpc("thread show", "threads.get", Value::Object(params)),
                Standard,
            )
        }
        Domain::Ocr(verb) => crate::ocr::build(verb)?,
        Domain::Approval(ApprovalVerb::List(o)) => (
            o.globals,
            rpc("approval list", "approvals.listPending", json!({})),
            Standard,
        ),
        Domain::Provider(verb) => crate::providers::provider(verb)?,
        Domain::Model(verb) => crate::compute::build_model(verb)?,
        Domain::Image(verb) => crate::compute::build_image(verb)?,
        Domain::Video(verb) => crate::compute::build_video(verb)?,
        Domain::Audio(verb) => crate::compute::build_audio(verb)?,
    };
    let mode = if globals.json {
        OutputMode::Json
    } else if globals.jsonl {
        OutputMode::Jsonl
    } else {
        parse_output_env(env(OUTPUT_ENV).as_deref())?
    };
    let timeout = match (&globals.timeout, env(TIMEOUT_ENV)) {
        (Some(flag), _) => parse_timeout(flag, "--timeout")?,
        (None, Some(var)) if !var.is_empty() => parse_timeout(&var, TIMEOUT_ENV)?,
        _ => class.default_timeout(),
    };
    Ok(Parsed::Call {
        invocation,
        mode,
        timeout,
    })
}

pub(crate) fn rpc(command: &'static str, method: &'static str, params: Value) -> Invocation {
    Invocation {
        command,
        method,
        params,
        stdin_field: None,
        operation: Operation::Rpc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn call(line: &str) -> (Invocation, OutputMode, Duration) {
        match parse(&argv(line), &no_env) {
            Ok(Parsed::Call {
                invocation,
                mode,
                timeout,
            }) => (invocation, mode, timeout),
            other => panic!("{line}: {other:?}"),
        }
    }

    fn usage(line: &str) -> UsageError {
        match parse(&argv(line), &no_env) {
            Err(e) => e,
            other => panic!("{line}: expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn two_token_grammar() {
        let (inv, mode, timeout) = call("system status");
        assert_eq!(inv.method, "cli.status");
        assert_eq!(mode, OutputMode::Text);
        assert_eq!(timeout, DEFAULT_TIMEOUT);
        assert!(matches!(parse(&argv("help"), &no_env), Ok(Parsed::Help(_))));
        assert_eq!(usage("help commands").mode, OutputMode::Text);
        assert_eq!(usage("system").mode, OutputMode::Text);
        assert!(usage("nope status").message.contains("nope"));
        assert!(parse(&argv(""), &no_env).is_err());
    }

    #[test]
    fn global_flags_only_after_the_verb() {
        // Before the command: a usage error, reported as text (DeepChat infers no mode there).
        let e = usage("--json system status");
        assert_eq!(e.mode, OutputMode::Text);
        assert_eq!(usage("system --json status").mode, OutputMode::Text);
        // After the verb, an unknown option keeps the machine mode for the usage error.
        assert_eq!(
            usage("system status --json --unknown").mode,
            OutputMode::Json
        );
        assert_eq!(
            usage("system status --jsonl --unknown").mode,
            OutputMode::Jsonl
        );
        assert_eq!(usage("system status --json --jsonl").mode, OutputMode::Json);
        assert_eq!(call("system status --jsonl").1, OutputMode::Jsonl);
        assert!(matches!(
            parse(&argv("system status --help"), &no_env),
            Ok(Parsed::Help(_))
        ));
        assert!(parse(&argv("system --help"), &no_env).is_err());
        assert!(parse(&argv("--help"), &no_env).is_err());
    }

    #[test]
    fn output_mode_from_environment() {
        let env = |k: &str| (k == OUTPUT_ENV).then(|| " JSONL ".to_owned());
        match parse(&argv("system version"), &env) {
            Ok(Parsed::Call { mode, .. }) => assert_eq!(mode, OutputMode::Jsonl),
            other => panic!("{other:?}"),
        }
        let flag_wins = parse(&argv("system version --json"), &env);
        assert!(matches!(
            flag_wins,
            Ok(Parsed::Call {
                mode: OutputMode::Json,
                ..
            })
        ));
        let bad = |k: &str| (k == OUTPUT_ENV).then(|| "yaml".to_owned());
        let e = parse(&argv("system version"), &bad).unwrap_err();
        assert_eq!(e.mode, OutputMode::Text);
        assert!(e.message.contains(OUTPUT_ENV));
    }

    #[test]
    fn timeouts_by_class_env_and_flag() {
        assert_eq!(call("agent run --prompt hi").2, LONG_RUNNING_TIMEOUT);
        assert_eq!(
            call("settings set --key fontSizeLevel --value 2").2,
            MUTATION_TIMEOUT
        );
        assert_eq!(call("run watch --run r").2, LONG_RUNNING_TIMEOUT);
        assert_eq!(
            call("system status --timeout 1800000").2,
            LONG_RUNNING_TIMEOUT
        );
        assert_eq!(
            call("system status --timeout=10").2,
            Duration::from_millis(10)
        );
        for bad in ["0", "1800001", "-1", "1.5", "01", "abc"] {
            let line = format!("system status --json --timeout {bad}");
            let e = parse(&argv(&line), &no_env).unwrap_err();
            assert_eq!(e.mode, OutputMode::Json, "{bad}");
        }
        let env = |k: &str| (k == TIMEOUT_ENV).then(|| "250".to_owned());
        assert!(matches!(
            parse(&argv("system status"), &env),
            Ok(Parsed::Call { timeout, .. }) if timeout == Duration::from_millis(250)
        ));
        let empty = |k: &str| (k == TIMEOUT_ENV).then(String::new);
        assert!(matches!(
            parse(&argv("system status"), &empty),
            Ok(Parsed::Call { timeout, .. }) if timeout == DEFAULT_TIMEOUT
        ));
        let bad = |k: &str| (k == TIMEOUT_ENV).then(|| "x".to_owned());
        assert!(parse(&argv("system status"), &bad).is_err());
    }

    #[test]
    fn agent_run_params() {
        let (inv, _, _) = call(
            "agent run --prompt hello --agent awp-agent --model m1 --project-dir /w --title T --system S --max-turns 3 --skills a,b --disable-tools shell",
        );
        assert_eq!(inv.method, "sessions.runDetached");
        assert_eq!(
            inv.params,
            json!({"prompt":"hello","agentId":"awp-agent","modelId":"m1","projectDir":"/w","title":"T",
                   "systemPrompt":"S","maxTurns":3,"activeSkills":["a","b"],"disabledAgentTools":["shell"]})
        );
        let (inv, _, _) = call("agent run --stdin");
        assert_eq!(inv.stdin_field, Some("prompt"));
        assert_eq!(inv.params, json!({}));
        usage("agent run");
        usage("agent run --prompt a --stdin");
        usage("agent run --prompt --json");
        usage("agent run --prompt hi --max-turns 0");
        usage("agent run --prompt hi --max-turns 101");
        usage("agent run --prompt hi --skills a,a");
        usage("agent run --prompt hi --agent a --agent b");
        let (inv, _, _) = call("agent run --prompt -x");
        assert_eq!(inv.params["prompt"], "-x");
    }

    #[test]
    fn run_commands() {
        let (inv, _, _) = call("run get --run r1 --limit 5");
        assert_eq!(inv.params, json!({"runId":"r1","limit":5}));
        let line = vec![
            "run".to_owned(),
            "get".to_owned(),
            "--run".to_owned(),
            "r1".to_owned(),
            "--cursor".to_owned(),
            r#"{"orderSeq":4,"id":"m4","extra":1}"#.to_owned(),
        ];
        match parse(&line, &no_env) {
            Ok(Parsed::Call { invocation, .. }) => {
                assert_eq!(invocation.params["cursor"], json!({"orderSeq":4,"id":"m4"}));
            }
            other => panic!("{other:?}"),
        }
        usage("run get --run r1 --cursor nope");
        let (inv, _, _) = call("run watch --run r1 --cursor e:3 --limit 2");
        assert_eq!(inv.operation, Operation::Stream);
        assert_eq!(
            inv.params,
            json!({"runId":"r1","cursor":"e:3","messageLimit":2})
        );
        let (inv, _, _) = call("run cancel --run r1");
        assert_eq!(inv.params, json!({"runId":"r1"}));
        usage("run get");
        usage("run cancel --run r1 --limit 3");
    }

    #[test]
    fn artifact_commands() {
        let (inv, _, timeout) = call("artifact get --id AbCdEfGhIjKlMnOp --out /tmp/x --overwrite");
        assert_eq!(inv.method, "artifacts.describe");
        assert_eq!(
            inv.operation,
            Operation::Download {
                out: PathBuf::from("/tmp/x"),
                overwrite: true
            }
        );
        assert_eq!(timeout, LONG_RUNNING_TIMEOUT);
        usage("artifact get --id AbCdEfGhIjKlMnOp");
        usage("artifact describe --id a --out /tmp/x");
        usage("artifact delete --id a --overwrite");
        assert_eq!(call("artifact delete --id a").0.method, "artifacts.delete");
    }

    #[test]
    fn settings_commands_and_scalar_values() {
        assert_eq!(call("settings get").0.params, json!({}));
        assert_eq!(
            call("settings get --keys fontFamily,ocrBackend").0.params,
            json!({"keys":["fontFamily","ocrBackend"]})
        );
        usage("settings get --keys ,");
        usage("settings set --key fontSizeLevel");
        for (raw, expect) in [
            ("true", json!(true)),
            ("2", json!(2)),
            ("-1.5e3", json!(-1500.0)),
            ("null", Value::Null),
            (r#""quoted""#, json!("quoted")),
            ("Inter", json!("Inter")),
            ("01", json!("01")),
        ] {
            assert_eq!(setting_value(raw).unwrap(), expect, "{raw}");
        }
        assert!(setting_value(r#""unterminated"#).is_err());
    }

    #[test]
    fn ocr_commands() {
        let (status, _, timeout) = call("ocr status");
        assert_eq!(
            (status.method, timeout),
            ("ocr.getRuntimeStatus", DEFAULT_TIMEOUT)
        );
        assert_eq!(call("ocr clear-cache").0.method, "ocr.clearCache");
        let (pdf, _, timeout) = call("ocr extract --file a.PDF --page-count 3 --max-tokens 100");
        assert_eq!(
            (pdf.method, timeout),
            ("ocr.extractUpload", LONG_RUNNING_TIMEOUT)
        );
        assert_eq!(
            pdf.params,
            json!({"mimeType": "application/pdf", "sourcePageCountHint": 3, "generationTokenLimit": 100})
        );
        assert_eq!(
            pdf.operation,
            Operation::Upload {
                path: PathBuf::from("a.PDF"),
                max_bytes: 50 * 1024 * 1024
            }
        );
        let (png, _, _) = call("ocr extract --file scan.bin --mime IMAGE/PNG --backend cpu");
        assert_eq!(
            png.params,
            json!({"mimeType": "image/png", "backend": "cpu"})
        );
        let id = "a".repeat(32);
        let (artifact, _, _) = call(&format!("ocr extract --artifact {id}"));
        assert_eq!(artifact.method, "ocr.extractArtifact");
        assert_eq!(artifact.params, json!({ "artifactId": id }));
        assert_eq!(artifact.operation, Operation::Rpc);
        for line in [
            "ocr extract",
            "ocr extract --file a.png --artifact b",
            "ocr extract --artifact abc --mime image/png",
            "ocr extract --file a.png --page-count 2",
            "ocr extract --file a.png --backend gpu",
            "ocr extract --file a.txt",
            "ocr extract --file a.pdf --max-tokens 16001",
            "ocr status --file a.png",
        ] {
            usage(line);
        }
    }

    #[test]
    fn our_commands() {
        assert_eq!(call("thread list --limit 3").0.params, json!({"limit":3}));
        assert_eq!(
            call("thread show --thread t1").0.params,
            json!({"threadId":"t1"})
        );
        assert_eq!(call("approval list").0.method, "approvals.listPending");
        usage("approval resolve");
    }

    proptest::proptest! {
        /// Whatever the words, parsing never panics; a leading flag is always a text-mode usage error, and a
        /// machine mode is only ever inferred from words after the first two.
        #[test]
        fn any_argv_parses_or_is_a_usage_error(
            words in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::string::string_regex("--?[a-z-]{0,12}(=[a-z0-9]{0,4})?").unwrap(),
                    proptest::string::string_regex("[a-z]{1,10}").unwrap(),
                    proptest::sample::select(vec![
                        "system".to_owned(), "status".to_owned(), "run".to_owned(), "get".to_owned(),
                        "--json".to_owned(), "--jsonl".to_owned(), "--timeout".to_owned(), "--run".to_owned(),
                        "help".to_owned(), "--help".to_owned(), "agent".to_owned(), "--prompt".to_owned(),
                    ]),
                ],
                0..8,
            )
        ) {
            let result = parse(&words, &no_env);
            if words.first().is_some_and(|w| w.starts_with('-')) {
                let error = result.expect_err("a leading flag is a usage error");
                proptest::prop_assert_eq!(error.mode, OutputMode::Text);
            } else if let Err(error) = result {
                let tail = words.get(2..).unwrap_or(&[]);
                if error.mode == OutputMode::Json {
                    proptest::prop_assert!(tail.iter().any(|w| w == "--json"));
                }
                if error.mode == OutputMode::Jsonl {
                    proptest::prop_assert!(tail.iter().any(|w| w == "--jsonl"));
                }
            }
        }
    }
}
