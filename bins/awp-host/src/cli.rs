//! Command-line shape (clap derive); every flag is documented here and in `docs/awp-host.md`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

const MAIN_EXAMPLES: &str = "\
Examples:
  awp-host chat \"What is in this directory?\"
  awp-host chat --thread th_3f9a0c1d2b4e5f60 \"And the largest file?\"
  echo \"summarize\" | awp-host chat --attach notes.txt --jsonl
  awp-host threads list
  awp-host agents list --json
  awp-host serve                          the local control plane for `deepchat` (see `awp-host serve --help`)

Exit codes: 0 ok, 2 usage, 3 agent unavailable or thread busy, 6 turn failed, 7 cancelled or timed out,
8 protocol violation or internal error, 130 second Ctrl-C/SIGTERM/SIGHUP (the agent was killed).
With --json/--jsonl every path prints one JSON object on stdout; a failure without a result record is
{\"type\":\"error\",\"error\":{\"code\",\"message\"},\"exit_code\":N} (usage errors included).
Environment: AWP_HOST_DATA_DIR, AWP_HOST_CONFIG_DIR, AWP_AGENT_CLI_* (the `env` agent), AWP_HOST_LOG (log filter),
AWP_CONTROL_PLANE_API_KEY (serve's task API key).";

/// Headless AWP host: chat with agent CLIs, persisted threads, resumable sessions.
#[derive(Debug, Parser)]
#[command(name = "awp-host", version, after_help = MAIN_EXAMPLES)]
pub struct Cli {
    /// Data directory holding the SQLite store [default: $AWP_HOST_DATA_DIR, else $XDG_DATA_HOME/awp-host,
    /// else ~/.local/share/awp-host]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Configuration directory holding agents.toml [default: $AWP_HOST_CONFIG_DIR, else
    /// $XDG_CONFIG_HOME/awp-host, else ~/.config/awp-host]
    #[arg(long, global = true, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send one turn to an agent and stream its answer (or, without a prompt on a terminal, open an
    /// interactive session); turns are stored in a thread.
    #[command(after_help = CHAT_EXAMPLES)]
    Chat(ChatArgs),
    /// List, show, rename, delete and export stored threads.
    #[command(subcommand)]
    Threads(ThreadsCommand),
    /// List configured agents.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Check an agent CLI against the AWP protocol rules (a scripted two-turn conversation plus a resume).
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
    /// List and call the tools an app bundle declares (`.agentproto/tools` and `.agentproto/drivers`).
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Serve the local control plane (the `deepchat` CLI's Unix socket) until SIGINT or SIGTERM, with an
    /// approvals console on this terminal; optionally the managed-task API (--tasks-listen).
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
}

const SERVE_EXAMPLES: &str = "\
Examples:
  awp-host serve                                   local control plane + approvals console on this terminal
  deepchat system status                           (in another terminal) talk to it
  deepchat agent run --agent awp-agent --prompt hi  a detached run; `deepchat run watch --run ID` follows it
  awp-host serve --approvals-socket /run/user/1000/awp-approver.sock --console off
  awp-host serve --app fixtures/tool-app            the app's tools on the socket (tools.list, tools.call)
  AWP_CONTROL_PLANE_API_KEY=$(openssl rand -hex 32) \\
    awp-host serve --tasks-listen 127.0.0.1:8100 --tasks-allow /usr/bin/echo

Local control plane: a Unix socket and descriptor under <data dir>/local-control/ (DeepChat's layout:
local-control.json, token rotated every start). `deepchat` finds it through the same data dir.
Approvals: sensitive mutations (e.g. settings.updatePublic of an execution setting) wait for an answer on the
approvals console (y = allow, anything else = deny) or from the program on --approvals-socket; with neither they
are denied at once (approval_denied, deepchat exit 5).
Tools (--app DIR): tools.list and tools.call run the app's tools as `awp-host tools call` does; a tool whose
TOOL.md says `mutates: true` needs a console approval, and agent tokens may call only `mutates: false` tools.
The first stdout line is `awp-host: local control listening on PATH`; with --tasks-listen a second line says
`awp-host: tasks api listening on http://ADDR` (port 0 picks a free port). The task API key is
AWP_CONTROL_PLANE_API_KEY (16 to 4096 bytes); tasks run only executables on the allow-list (--tasks-allow
entries plus the binaries of --app's drivers).
Shutdown (SIGINT/SIGTERM): stop accepting, end open streams with `unavailable`, cancel live runs (recorded
cancelled), deny pending approvals, remove socket and descriptor.
Exit codes: 0 stopped by a signal, 2 usage, 3 another serve already runs for this data directory, 8 failure.";

/// `serve` arguments.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// An app bundle (`DIR/.agentproto/{tools,drivers}`): its tools are served as tools.list/tools.call on the
    /// local control socket, and its drivers' binaries join the task allow-list. Loaded once at start; a bundle
    /// that does not load stops serve (exit 2)
    #[arg(long, value_name = "DIR")]
    pub app: Option<PathBuf>,
    /// Also serve the managed-task API on this loopback address, e.g. 127.0.0.1:8100 (port 0 picks a free port)
    #[arg(long, value_name = "ADDR")]
    pub tasks_listen: Option<std::net::SocketAddr>,
    /// An executable tasks may run (repeatable); resolved to its canonical path at start. Without any, every task
    /// fails with executable_not_allowed
    #[arg(long = "tasks-allow", value_name = "PATH", requires = "tasks_listen")]
    pub tasks_allow: Vec<PathBuf>,
    /// Tasks run at once
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = parse_limit)]
    pub tasks_workers: usize,
    /// Open a second Unix socket for a trusted approver program (its token is written to PATH.token, 0600)
    #[arg(long, value_name = "PATH")]
    pub approvals_socket: Option<PathBuf>,
    /// The approvals console on this terminal: auto (when stdin and stdout are terminals and serve runs in the
    /// foreground), on (read answers from stdin even when it is not a terminal), off
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub console: String,
    /// The Tesseract executable offline OCR runs (`ocr.*`, `deepchat ocr`): a name looked up on PATH or a path.
    /// When it cannot run, `deepchat ocr status` says unavailable and extractions fail with `unavailable`
    #[arg(long, value_name = "PATH", default_value = "tesseract")]
    pub ocr_tesseract: std::ffi::OsString,
    /// Tesseract language of OCR, e.g. `eng` or `deu` (its traineddata must be installed; `tesseract --list-langs`)
    #[arg(long, value_name = "LANG", default_value = "eng", value_parser = parse_ocr_language)]
    pub ocr_language: String,
}

const CHAT_EXAMPLES: &str = "\
Examples:
  awp-host chat \"hello\"                               new thread with the default agent
  awp-host chat --agent claude --model sonnet \"hi\"     a named agent from agents.toml
  awp-host chat --thread th_3f9a0c1d2b4e5f60 \"more\"    follow-up: resumes the agent's session
  awp-host chat --cwd ~/src/app \"run the tests\"       the thread (and its agent) works in ~/src/app
  awp-host chat --thread 3f9a \"more\"                   the same thread by a unique prefix of its id
  awp-host chat -c \"and then?\"                        continue the most recent thread
  awp-host chat --agent claude --system \"be terse\" hi  a system prompt (stream-json agents)
  awp-host chat --agent-arg=--verbose \"hi\"             an extra argument for the agent on this launch
  awp-host chat --attach shot.png \"what is this?\"      image (PNG/JPEG/GIF/WebP), PDF or UTF-8 text, 10 MiB each
  git diff | awp-host chat -                           prompt from stdin (at most 1 MiB)
  awp-host chat --agent claude                         on a terminal: an interactive session
  awp-host chat --jsonl \"hi\"                           one normalized event per line, then a result record

Output: assistant text on stdout as it streams (stream-json agents: token by token, launched with
--include-partial-messages unless `include_partial_messages = false` in agents.toml); separate text blocks and
messages are kept apart by a blank line; tool use as one-line summaries (`⚙ Bash {...}`);
the status line (status, tokens, cost when reported, duration, thread and run ids) and errors go to stderr.
A thread remembers the directory it was started in (or --cwd): every turn runs the agent there, from
wherever awp-host is run; when that directory is gone the turn is refused (thread_cwd_missing, exit 3).
Claude Code (a stream-json agent whose executable is named `claude`, or `control_protocol = true` in
agents.toml) is driven with its control protocol: `initialize` after launch, `interrupt` on Ctrl-C (the turn
ends with Claude's result, the process stays for the next turn), and tool permissions asked of awp-host
(--permission-prompt-tool stdio): --yes allows, a terminal asks (tool and input shown), otherwise denied.
Ctrl-C, SIGTERM or SIGHUP cancels the turn (recorded `cancelled`, exit 7); a second one kills the agent's
process group at once, records the run (cancelled, code aborted), prints its thread and run ids and exits 130.
A thread with a turn running elsewhere is refused (thread_busy, exit 3).

Without PROMPT on a terminal, chat opens an interactive session: one agent process serves every turn,
each line is a turn stored in the thread, Ctrl-C cancels the running turn (the next line restarts the agent
and resumes its session; Claude Code with the control protocol is interrupted and keeps its process),
Ctrl-D or /exit ends; /thread prints the ids, /new starts a new thread.
Line history is kept in <data dir>/history.";

/// `chat` arguments.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Agent name (see `awp-host agents list`) [default: the thread's agent, else the configured default]
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Continue this thread (resumes the agent's native session with --resume); a unique prefix of its id is
    /// enough (`th_3f9a`, `3f9a`)
    #[arg(long, value_name = "ID", conflicts_with = "new")]
    pub thread: Option<String>,
    /// Continue the most recently updated thread (`awp-host threads list` shows it first)
    #[arg(short = 'c', long = "continue", conflicts_with_all = ["thread", "new", "cwd"])]
    pub continue_latest: bool,
    /// Start a new thread (the default without --thread or --continue)
    #[arg(long)]
    pub new: bool,
    /// Working directory of a new thread's agent, recorded on the thread: every later turn of the thread runs
    /// the agent there, wherever awp-host is started [default: the current directory]
    #[arg(long, value_name = "DIR", conflicts_with = "thread")]
    pub cwd: Option<PathBuf>,
    /// Model to ask the agent for (passed as --model; ACP agents: set through their `model` config option) [default: the agent's configured model]
    #[arg(long, value_name = "MODEL", value_parser = parse_model)]
    pub model: Option<String>,
    /// A system prompt for this turn, at most 64 KiB: stream-json agents (Claude Code) get it as
    /// `--append-system-prompt`; awp-jsonl and ACP agents have no such option and refuse it
    /// (system_prompt_unsupported; pass the agent's own flag with --agent-arg). Not stored: give it on each turn.
    /// A prompt starting with `-` is taken as is (`--system "-be terse"`)
    #[arg(long, value_name = "PROMPT", allow_hyphen_values = true)]
    pub system: Option<String>,
    /// An extra argument for the agent's command line on this launch (repeatable, in order; at most 64, each
    /// 1 byte to 16 KiB), after its configured args and before --model/--resume
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// Attach a file (repeatable): PNG, JPEG, GIF, WebP → image; PDF → document; UTF-8 text → text.
    /// At most 10 MiB each, 16 per turn
    #[arg(long = "attach", value_name = "FILE")]
    pub attach: Vec<PathBuf>,
    /// Print one JSON object at the end: the result record plus the full assistant `text` (a failure before
    /// the turn, usage errors included: `{"type":"error","error":{"code","message"},"exit_code"}`)
    #[arg(long, conflicts_with = "jsonl")]
    pub json: bool,
    /// Print normalized events as JSON Lines, then one `{"type":"result",…}` record (a failure before the turn:
    /// one `{"type":"error",…}` line)
    #[arg(long)]
    pub jsonl: bool,
    /// ACP agents: allow this turn's permission requests once (an `allow_once` option; `allow_always` only when
    /// it is the only allow offered); Claude Code with the control protocol: allow its tool uses (`can_use_tool`)
    /// [default: ask on a terminal stdin, else reject]
    #[arg(long)]
    pub yes: bool,
    /// Fail the turn (exit 7) when the agent writes nothing for this long: seconds (`90`) or with a unit (`90s`,
    /// `1500ms`, `10m`); from 1s to 1 day [default: off]
    #[arg(long, value_name = "DURATION", value_parser = parse_idle_timeout)]
    pub idle_timeout: Option<Duration>,
    /// Fail the turn (exit 7, agent_first_output_timeout) when an awp-jsonl/stream-json agent prints no protocol
    /// event this long after its turn was written, or Claude Code does not answer its `initialize` control
    /// request, or an ACP agent a setup request (initialize, session/new, …), within it (it may speak another
    /// protocol or wait for a login): seconds
    /// (`30`) or with a unit (`30s`, `2m`); 0 = off, else from 1s to 1 day [default: the agent's
    /// `first_output_timeout_secs` in agents.toml, else 120s]
    #[arg(long, value_name = "DURATION", value_parser = parse_first_output_timeout)]
    pub first_output_timeout: Option<Duration>,
    /// The prompt (words are joined with spaces); `-` or nothing with a non-terminal stdin reads stdin (1 MiB max);
    /// nothing on a terminal opens an interactive session
    #[arg(value_name = "PROMPT")]
    pub prompt: Vec<String>,
}

/// `threads` subcommands.
#[derive(Debug, Subcommand)]
pub enum ThreadsCommand {
    /// List threads, most recently updated first.
    List {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        /// Show at most this many threads
        #[arg(long, default_value_t = 50, value_name = "N", value_parser = parse_limit)]
        limit: usize,
    },
    /// Show a thread's messages, runs and session ids.
    Show {
        /// Thread id (`th_…`) or a unique prefix of it
        #[arg(value_name = "ID")]
        id: String,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Delete a thread with its runs, messages and session ids (refused while a turn runs on it: thread_busy).
    Delete {
        /// Thread id (`th_…`) or a unique prefix of it
        #[arg(value_name = "ID")]
        id: String,
        /// Print `{"deleted":{"id","runs","messages"}}` instead of text
        #[arg(long)]
        json: bool,
    },
    /// Set a thread's title (at most 80 characters, no control characters).
    Rename {
        /// Thread id (`th_…`) or a unique prefix of it
        #[arg(value_name = "ID")]
        id: String,
        /// The new title (words are joined with spaces)
        #[arg(value_name = "TITLE", required = true)]
        title: Vec<String>,
        /// Print the renamed thread as JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Print a thread as a Markdown transcript or as JSON Lines (one record per run and message).
    #[command(after_help = EXPORT_HELP)]
    Export {
        /// Thread id (`th_…`) or a unique prefix of it
        #[arg(value_name = "ID")]
        id: String,
        /// md: a readable transcript; jsonl: records (see below)
        #[arg(long, default_value = "md", value_parser = ["md", "jsonl"])]
        format: String,
        /// Failures as one `{"type":"error",…}` JSON object (the export itself is --format)
        #[arg(long)]
        json: bool,
    },
}

const EXPORT_HELP: &str = "\
Examples:
  awp-host threads export 3f9a > chat.md
  awp-host threads export th_3f9a0c1d2b4e5f60 --format jsonl | jq -c 'select(.type==\"message\")'

--format jsonl prints one object per line: first {\"type\":\"thread\",…} (the fields of `threads show --json`'s
thread), then for each run, oldest first, {\"type\":\"run\",…} (the fields of its runs[]) followed by that run's
messages {\"type\":\"message\",\"id\",\"run_id\",\"role\",\"content\",\"created_at\"}.";

/// `agents` subcommands.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List agents: name, protocol, executable (a symlink as `LINK -> FILE`, the file that runs), model, and
    /// whether each is usable (or why not, with its `agents.toml` line and column).
    List {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
}

const CHECK_EXAMPLES: &str = "\
Examples:
  awp-host check -- /usr/local/bin/awp-agent
  awp-host check --protocol stream-json -- /usr/local/bin/claude --permission-mode default
  awp-host check --json -- ./target/debug/awp-fixture --mode banner
  awp-host check --protocol acp -- ./target/debug/acp-fixture --mode echo
  awp-host check --agent claude --timeout 5m         an agents.toml entry, with its protocol, args and env
  awp-host check --env ANTHROPIC_API_KEY=sk-... -- /usr/local/bin/agent

Prints each rule as PASS, FAIL, WARN (an optional rule not followed) or SKIP (could not be exercised),
labelled required or optional, with evidence; the last line counts passed / failed / skipped rules.
Exit 0 when every required rule passes (AWP: none failed or skipped; ACP: none failed), 8 otherwise,
3 when the agent cannot be launched or started, 2 for usage errors. The agent gets the OS environment
allowlist, the configured agent's env (--agent) and every --env.";

/// `check` arguments.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Protocol the agent speaks (with --agent: the agent's own)
    #[arg(long, default_value = "awp-jsonl", value_parser = ["awp-jsonl", "stream-json", "acp"])]
    pub protocol: String,
    /// Check the configured agent NAME (`awp-host agents list`): its executable, protocol, args, env and default
    /// model, as `chat --agent NAME` launches it. Instead of `-- CMD ARGS…`
    #[arg(long, value_name = "NAME", conflicts_with_all = ["command", "protocol", "remote_api_opt_in"])]
    pub agent: Option<String>,
    /// An environment variable for the agent, K=V (repeatable; overrides the configured agent's value of K)
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Longest wait for one turn (awp-jsonl, stream-json) or one answer (acp): seconds (`30`) or with a unit
    /// (`30s`, `5m`); from 1s to 1 day [default: 120s for AWP turns, 60s for ACP answers]
    #[arg(long, value_name = "DURATION", value_parser = parse_idle_timeout)]
    pub timeout: Option<Duration>,
    /// Model to pass with --model on every launch [default: none; with --agent, the agent's default model]
    #[arg(long, value_name = "MODEL", value_parser = parse_model)]
    pub model: Option<String>,
    /// Print the report as JSON (`{"rules":[{"id","severity","description","outcome",…}],"summary":{…},
    /// "conformant":bool}`)
    #[arg(long)]
    pub json: bool,
    /// Allow non-loopback http(s) URLs in the command's arguments (also enabled by
    /// AWP_AGENT_REMOTE_API_OPT_IN=1)
    #[arg(long)]
    pub remote_api_opt_in: bool,
    /// The agent command after `--`: its executable (a relative path is taken from the current directory),
    /// then its arguments
    #[arg(last = true, required_unless_present = "agent", value_name = "CMD")]
    pub command: Vec<String>,
}

/// Longest `--env` entry, key and value together, in bytes.
pub const MAX_ENV_ENTRY_BYTES: usize = 128 * 1024;

/// `--env K=V`: a non-empty key without `=` or NUL, a value without NUL; at most [`MAX_ENV_ENTRY_BYTES`].
fn parse_env(text: &str) -> Result<(String, String), String> {
    if text.len() > MAX_ENV_ENTRY_BYTES {
        return Err(format!("longer than {MAX_ENV_ENTRY_BYTES} bytes"));
    }
    let Some((key, value)) = text.split_once('=') else {
        return Err("expected K=V".to_owned());
    };
    if key.is_empty() || key.contains('\0') || value.contains('\0') {
        return Err("expected K=V with a non-empty K and no NUL".to_owned());
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// Shortest accepted non-zero timeout (`--idle-timeout`, `--first-output-timeout`, `check --timeout`): anything
/// shorter would time out turns spuriously.
pub const MIN_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest accepted timeout of any duration flag: one day
/// ([`agentwire_host::agents::MAX_FIRST_OUTPUT_TIMEOUT_SECS`], also the bound of `first_output_timeout_secs`).
pub const MAX_TIMEOUT: Duration =
    Duration::from_secs(agentwire_host::agents::MAX_FIRST_OUTPUT_TIMEOUT_SECS);

/// The one reading of every duration flag: a bare whole number of seconds (`90`) or a duration with units
/// (`90s`, `500ms`, `2m`, `1h30m`, `1h 30m`; as `humantime::parse_duration` reads them).
fn parse_duration(text: &str) -> Result<Duration, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| format!("must be at most {} seconds", MAX_TIMEOUT.as_secs()));
    }
    humantime::parse_duration(text).map_err(|e| {
        format!("{e}; expected whole seconds (90) or a duration with a unit (90s, 500ms, 2m, 1h)")
    })
}

/// `--idle-timeout`, `check --timeout`: a [`parse_duration`] from [`MIN_IDLE_TIMEOUT`] to [`MAX_TIMEOUT`].
fn parse_idle_timeout(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration < MIN_IDLE_TIMEOUT {
        return Err("must be at least 1s".to_owned());
    }
    if duration > MAX_TIMEOUT {
        return Err(format!("must be at most {} seconds", MAX_TIMEOUT.as_secs()));
    }
    Ok(duration)
}

/// `--first-output-timeout`: a [`parse_duration`]; `0` (any unit) is off, else from [`MIN_IDLE_TIMEOUT`] to
/// [`MAX_TIMEOUT`].
fn parse_first_output_timeout(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Ok(Duration::ZERO);
    }
    if duration < MIN_IDLE_TIMEOUT {
        return Err("must be 0 (off) or at least 1s".to_owned());
    }
    if duration > MAX_TIMEOUT {
        return Err(format!("must be at most {} seconds", MAX_TIMEOUT.as_secs()));
    }
    Ok(duration)
}

/// `--model`: a non-empty name.
fn parse_model(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    Ok(text.to_owned())
}

/// `threads list --limit`: at least 1.
fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

const TOOLS_CALL_EXAMPLES: &str = "\
Examples:
  awp-host tools call echo --input '{\"msg\":\"hello\"}'
  awp-host tools call notes-list --input '{}' --app fixtures/tool-app --json
  echo '{\"name\":\"Ada\"}' | awp-host tools call greet --input -

Runs the tool exactly as an agent would: input checked against the tool's schema, secrets from this
environment (auth.state.env), the driver's binary with no shell in its own process group.
Exit codes: 0 ok, 2 usage (bad --input, unknown tool, input_invalid, invalid manifest), 3 tool unavailable
(spawn_failed, no_driver, missing_secret), 6 the tool failed (its exit code's semantic error or
output_parse_failed), 7 timeout or cancelled (Ctrl-C, SIGTERM, SIGHUP), 8 internal.";

/// `tools` subcommands.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List the app's tools with the driver that runs each.
    List {
        /// App bundle root (the directory holding `.agentproto/`) [default: the current directory]
        #[arg(long, value_name = "DIR", default_value = ".")]
        app: PathBuf,
        /// Print one JSON object (`{"app","tools":[…],"drivers":[…]}`, or `{"error":{…}}`)
        #[arg(long)]
        json: bool,
    },
    /// Call one tool with a JSON input and print its output.
    #[command(after_help = TOOLS_CALL_EXAMPLES)]
    Call(ToolsCallArgs),
}

/// `tools call` arguments.
#[derive(Debug, Args)]
pub struct ToolsCallArgs {
    /// Tool id (see `awp-host tools list`)
    #[arg(value_name = "TOOL")]
    pub tool: String,
    /// The input: a JSON document, or `-` to read it from stdin (1 MiB max)
    #[arg(long, value_name = "JSON|-")]
    pub input: String,
    /// App bundle root (the directory holding `.agentproto/`) [default: the current directory]
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub app: PathBuf,
    /// Print one JSON object: `{"ok":true,"output":…}` or `{"ok":false,"error":{"code","message",…}}`
    #[arg(long)]
    pub json: bool,
}

/// `--ocr-language`: one Tesseract language code (ASCII letters, digits and `_`), 1 to 64 bytes.
fn parse_ocr_language(value: &str) -> Result<String, String> {
    let valid = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if valid {
        Ok(value.to_owned())
    } else {
        Err("expected one Tesseract language code such as eng or chi_sim (1 to 64 letters, digits or _)".to_owned())
    }
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    #[test]
    fn every_duration_flag_reads_the_same_forms() {
        for (text, secs_ms) in [
            ("2", 2000),
            ("2s", 2000),
            ("1500ms", 1500),
            ("1m", 60_000),
            ("1h 30m", 5_400_000),
            ("86400", 86_400_000),
            ("1day", 86_400_000),
        ] {
            let expect = Ok(Duration::from_millis(secs_ms));
            assert_eq!(parse_idle_timeout(text), expect, "{text}");
            assert_eq!(parse_first_output_timeout(text), expect, "{text}");
        }
        // 0 is off only where documented (the first-output timeout); the idle timeout needs at least 1s.
        for text in ["0", "0s", "0ms"] {
            assert_eq!(
                parse_first_output_timeout(text),
                Ok(Duration::ZERO),
                "{text}"
            );
            assert!(parse_idle_timeout(text).is_err(), "{text}");
        }
        // Bounds: 1s is the least non-zero value and one day the most, for both.
        for text in [
            "999ms",
            "86401",
            "86400001ms",
            "2days",
            "x",
            "",
            "-1",
            "1.5",
        ] {
            assert!(parse_idle_timeout(text).is_err(), "{text}");
            assert!(parse_first_output_timeout(text).is_err(), "{text}");
        }
        assert_eq!(parse_idle_timeout("1000ms"), Ok(MIN_IDLE_TIMEOUT));
        assert_eq!(parse_first_output_timeout("1s"), Ok(MIN_IDLE_TIMEOUT));
        assert!(
            parse_idle_timeout("99999999999999999999")
                .is_err_and(|e| e.contains("at most 86400 seconds"))
        );
    }
}
