//! `Command`: what to run (program + argv, no shell), where, and with which allowlisted environment.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::child::{self, Child, ChildConfig};
use crate::error::SpawnError;

/// Names of host environment variables that [`Command::inherit_os_env`] copies into a child when they are set.
///
/// Unix: `PATH HOME USER LOGNAME SHELL LANG TERM TMPDIR TZ`, plus every name starting with a prefix in
/// [`OS_ENV_ALLOWLIST_PREFIXES`] (`LC_*`).
/// Windows adds `SYSTEMROOT COMSPEC PATHEXT USERPROFILE APPDATA LOCALAPPDATA TEMP TMP`.
/// Names in [`ENV_DENYLIST`] (`CLAUDECODE`) never pass through an inherit helper.
///
/// Source: the AWP agent CLI protocol (`agent-cli-protocol.md`, section "Launch contract": "The child inherits only
/// a small operating-system environment allowlist plus the exact `AWP_AGENT_CLI_ENV_JSON` entries"); invariant 6 of
/// this repository's `docs/architecture.md`.
#[cfg(not(windows))]
pub const OS_ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "TZ",
];

/// Names of host environment variables that [`Command::inherit_os_env`] copies into a child when they are set.
///
/// Windows: the Unix names plus `SYSTEMROOT COMSPEC PATHEXT USERPROFILE APPDATA LOCALAPPDATA TEMP TMP`.
#[cfg(windows)]
pub const OS_ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "TERM",
    "TMPDIR",
    "TZ",
    "SYSTEMROOT",
    "COMSPEC",
    "PATHEXT",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "TEMP",
    "TMP",
];

/// Name prefixes that [`Command::inherit_os_env`] copies as well (`LC_ALL`, `LC_CTYPE`, …).
pub const OS_ENV_ALLOWLIST_PREFIXES: &[&str] = &["LC_"];

/// Host variables that no inherit helper ever copies, even when asked for by name.
///
/// `CLAUDECODE=1` is set inside a Claude Code session and makes a nested Claude Code refuse to start (observed
/// behaviour of the Claude Code CLI, which an agent host run from a Claude Code terminal would otherwise pass on).
/// An explicit [`Command::env`] entry is still honoured.
pub const ENV_DENYLIST: &[&str] = &["CLAUDECODE"];

/// How the child's stdout is delivered by [`crate::Stdout`].
#[derive(Clone, Debug)]
pub(crate) enum StdoutMode {
    /// Raw byte chunks as read from the pipe.
    Bytes,
    /// JSON Lines frames, decoded with these limits.
    Jsonl(agentwire_jsonl::Limits),
}

/// One argument and whether it is shown in `Debug` output.
#[derive(Clone)]
struct Arg {
    value: OsString,
    redacted: bool,
}

/// A program to run as a supervised child: argv only (never a shell), an explicit working directory and an
/// environment that starts **empty**.
///
/// Build it, then [`Command::spawn`] it. The child gets its own process group, piped stdin/stdout/stderr, and is
/// supervised as described in the crate docs.
///
/// `Debug` output shows the program, the arguments (those added with [`Command::arg_redacted`] as `***`), the working
/// directory and the **names** of environment variables, never their values.
///
/// ```
/// use agentwire_process::Command;
/// let mut cmd = Command::new("claude");
/// cmd.args(["--print", "--output-format", "stream-json"]).inherit_os_env().env("ANTHROPIC_API_KEY", "sk-secret");
/// assert!(!format!("{cmd:?}").contains("sk-secret"));
/// ```
#[derive(Clone)]
pub struct Command {
    program: OsString,
    args: Vec<Arg>,
    current_dir: Option<PathBuf>,
    env: BTreeMap<OsString, OsString>,
    /// Names removed with [`Command::env_remove`]: no inherit helper adds them back, whatever the call order.
    removed: BTreeSet<OsString>,
    /// Names given to [`Command::env`] that no environment can hold; [`Command::spawn`] fails on the first.
    /// Only a redacted form is kept (never the value, nor anything after a `=` in the name).
    invalid_env: Vec<InvalidEnvName>,
    stdout_mode: StdoutMode,
    config: ChildConfig,
}

/// An environment name rejected by [`Command::env`], kept redacted until [`Command::spawn`] reports it.
#[derive(Clone, Debug)]
struct InvalidEnvName {
    /// The name up to its first `=` or NUL, then a `***` placeholder for the rest.
    shown: String,
    reason: &'static str,
}

impl InvalidEnvName {
    /// Why `name` cannot be an environment variable name, or `None` when it can.
    ///
    /// A name must be non-empty and hold neither `=` (the separator of `NAME=value`: `PATH=/evil:/bin` would set
    /// `PATH`) nor NUL (the terminator of C strings).
    fn check(name: &OsStr) -> Option<Self> {
        let bytes = name.as_encoded_bytes();
        if bytes.is_empty() {
            return Some(Self {
                shown: String::new(),
                reason: "the name is empty",
            });
        }
        let cut = bytes.iter().position(|&b| b == b'=' || b == 0)?;
        let (head, rest) = bytes.split_at(cut);
        let (mark, reason) = if rest.first() == Some(&b'=') {
            ("=", "the name contains '='")
        } else {
            ("\\0", "the name contains a nul byte")
        };
        Some(Self {
            shown: format!("{}{mark}***", String::from_utf8_lossy(head)),
            reason,
        })
    }
}

impl Command {
    /// A command running `program` with no arguments, the parent's working directory and an **empty** environment.
    ///
    /// A `program` without a path separator is searched in the `PATH` set on this command, or in this process's
    /// `PATH` when the command sets none (the child still does not get `PATH` unless it is set or inherited).
    /// A program with a separator is used as a path (relative to [`Command::current_dir`] when that is set).
    /// It is never interpreted by a shell.
    ///
    /// An empty environment really is empty (`/usr/bin/env` prints nothing). A shell run as the program in a test
    /// may still print a `PATH`: `sh -c 'echo $PATH'` shows dash's (or bash's) built-in default search path, which
    /// the shell sets for itself when it finds none — it does not come from this process, so it is not a leak.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self {
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            current_dir: None,
            env: BTreeMap::new(),
            removed: BTreeSet::new(),
            invalid_env: Vec::new(),
            stdout_mode: StdoutMode::Bytes,
            config: ChildConfig::default(),
        }
    }

    /// Appends one argument, passed verbatim (no splitting, no globbing, no quoting).
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(Arg {
            value: arg.as_ref().to_os_string(),
            redacted: false,
        });
        self
    }

    /// Appends one argument that holds a secret: passed verbatim, shown as `***` in `Debug` output.
    pub fn arg_redacted(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(Arg {
            value: arg.as_ref().to_os_string(),
            redacted: true,
        });
        self
    }

    /// Appends several arguments, each passed verbatim.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for arg in args {
            self.arg(arg);
        }
        self
    }

    /// Sets the child's working directory (default: the parent's).
    ///
    /// A directory that does not exist makes [`Command::spawn`] fail with [`SpawnError::WorkingDirNotFound`];
    /// a path that exists but is not a directory, with [`SpawnError::WorkingDirNotADirectory`].
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.current_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Sets one environment variable for the child; replaces an earlier entry of the same name, and undoes an
    /// earlier [`Command::env_remove`] of it.
    ///
    /// A name must be non-empty and contain neither `=` nor NUL. An invalid name is not stored (nor its value):
    /// [`Command::spawn`] then fails with [`SpawnError::InvalidEnvName`] (code `invalid_env_name`), and `Debug`
    /// shows only the part before the `=`/NUL followed by `***`.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        let key = key.as_ref();
        if let Some(invalid) = InvalidEnvName::check(key) {
            self.invalid_env.push(invalid);
            return self;
        }
        self.removed.remove(key);
        self.env
            .insert(key.to_os_string(), value.as_ref().to_os_string());
        self
    }

    /// Sets several environment variables, as [`Command::env`] does for each.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (key, value) in vars {
            self.env(key, value);
        }
        self
    }

    /// Removes one environment variable from the child's environment (explicit or inherited).
    ///
    /// Removal wins over the inherit helpers whatever the call order: `.env_remove("HOME").inherit_os_env()` and
    /// `.inherit_os_env().env_remove("HOME")` both leave `HOME` out. A later [`Command::env`] of the name sets it
    /// again (the last explicit call wins).
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Self {
        let key = key.as_ref();
        self.env.remove(key);
        self.removed.insert(key.to_os_string());
        self
    }

    /// Copies the host variables named in [`OS_ENV_ALLOWLIST`] (and `LC_*`) that are set in this process.
    ///
    /// Entries already set on this command win, and names removed with [`Command::env_remove`] stay removed
    /// (call order does not matter). [`ENV_DENYLIST`] names are skipped.
    pub fn inherit_os_env(&mut self) -> &mut Self {
        for (key, value) in std::env::vars_os() {
            if is_os_allowlisted(&key) && !is_denied(&key) && !self.removed.contains(&key) {
                self.env.entry(key).or_insert(value);
            }
        }
        self
    }

    /// Copies the named host variables that are set in this process (for example a driver's `sandbox.env.pass`).
    ///
    /// Entries already set on this command win, and names removed with [`Command::env_remove`] stay removed.
    /// [`ENV_DENYLIST`] names are skipped. Unset names are ignored.
    pub fn inherit_env<I, S>(&mut self, names: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for name in names {
            let name = name.as_ref();
            if is_denied(name) || self.removed.contains(name) {
                continue;
            }
            if let Some(value) = std::env::var_os(name) {
                self.env.entry(name.to_os_string()).or_insert(value);
            }
        }
        self
    }

    /// Delivers stdout as JSON Lines frames decoded with `limits` ([`crate::StdoutItem::Frame`]).
    ///
    /// Default: raw byte chunks ([`crate::StdoutItem::Bytes`]).
    pub fn stdout_jsonl(&mut self, limits: agentwire_jsonl::Limits) -> &mut Self {
        self.stdout_mode = StdoutMode::Jsonl(limits);
        self
    }

    /// Delivers stdout as raw byte chunks (the default).
    pub fn stdout_bytes(&mut self) -> &mut Self {
        self.stdout_mode = StdoutMode::Bytes;
        self
    }

    /// Replaces the supervision settings (drain window, stderr tail size, …).
    pub fn config(&mut self, config: ChildConfig) -> &mut Self {
        self.config = config;
        self
    }

    /// Sets [`ChildConfig::drain_window`] (default 2 s).
    pub fn drain_window(&mut self, window: Duration) -> &mut Self {
        self.config.drain_window = window;
        self
    }

    /// Sets [`ChildConfig::stderr_tail_bytes`] (default 128 KiB).
    pub fn stderr_tail_bytes(&mut self, bytes: usize) -> &mut Self {
        self.config.stderr_tail_bytes = bytes;
        self
    }

    /// The program as given to [`Command::new`].
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// The names of the environment variables the child will get, sorted.
    pub fn env_names(&self) -> impl Iterator<Item = &OsStr> {
        self.env.keys().map(OsString::as_os_str)
    }

    /// Starts the child: own process group, piped stdin/stdout/stderr, only this command's environment.
    ///
    /// Must be called inside a tokio runtime with IO and time enabled; the supervision tasks run on it.
    ///
    /// # Errors
    /// [`SpawnError`]: an environment name given to [`Command::env`] is invalid, the executable was not found,
    /// is not executable, permission was denied, the working directory does not exist or is not a directory,
    /// there is no tokio runtime, or another OS error. Messages name the program, never an environment value or
    /// an argument.
    pub fn spawn(&mut self) -> Result<Child, SpawnError> {
        if let Some(invalid) = self.invalid_env.first() {
            return Err(SpawnError::InvalidEnvName {
                program: display_program(&self.program),
                name: invalid.shown.clone(),
                reason: invalid.reason,
            });
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SpawnError::NoRuntime {
                program: display_program(&self.program),
            });
        }
        // The one place in the workspace that builds an OS command (clippy.toml forbids it elsewhere):
        // every child goes through this supervision (no shell, own process group, allowlisted env).
        #[allow(clippy::disallowed_methods)]
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(self.args.iter().map(|a| &a.value))
            .env_clear()
            .envs(&self.env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        #[cfg(target_os = "linux")]
        if self.config.kill_on_parent_death {
            set_parent_death_kill(&mut cmd);
        }
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        match cmd.spawn() {
            Ok(child) => child::start(child, self.stdout_mode.clone(), self.config.clone())
                .map_err(|source| SpawnError::Io {
                    program: display_program(&self.program),
                    source,
                }),
            Err(err) => {
                // The PATH a bare program name was searched in: the command's own, else this process's.
                let search_path = self
                    .env
                    .get(OsStr::new("PATH"))
                    .cloned()
                    .or_else(|| std::env::var_os("PATH"));
                Err(SpawnError::from_io(
                    &self.program,
                    self.current_dir.as_deref(),
                    search_path.as_deref(),
                    err,
                ))
            }
        }
    }
}

/// Makes the child get SIGKILL when the spawning thread ends ([`ChildConfig::kill_on_parent_death`]).
#[cfg(target_os = "linux")]
fn set_parent_death_kill(cmd: &mut tokio::process::Command) {
    let parent = rustix::process::getpid();
    let hook = move || -> std::io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        // The parent may have died between fork and the prctl: then the signal will never come.
        if rustix::process::getppid() != Some(parent) {
            return Err(std::io::Error::from_raw_os_error(
                rustix::io::Errno::SRCH.raw_os_error(),
            ));
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It only makes raw system calls (prctl, getppid)
    // through rustix, which neither allocate nor take locks (async-signal-safe); the error path builds an
    // `io::Error` from a raw OS code, which does not allocate.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Args<'a>(&'a [Arg]);
        impl fmt::Debug for Args<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list()
                    .entries(self.0.iter().map(|a| {
                        if a.redacted {
                            OsStr::new("***")
                        } else {
                            a.value.as_os_str()
                        }
                    }))
                    .finish()
            }
        }
        struct Names<'a>(&'a BTreeMap<OsString, OsString>);
        impl fmt::Debug for Names<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list().entries(self.0.keys()).finish()
            }
        }
        let mut out = f.debug_struct("Command");
        out.field("program", &self.program)
            .field("args", &Args(&self.args))
            .field("current_dir", &self.current_dir)
            .field("env_names", &Names(&self.env));
        if !self.removed.is_empty() {
            out.field("env_removed", &self.removed);
        }
        if !self.invalid_env.is_empty() {
            let shown: Vec<&str> = self.invalid_env.iter().map(|i| i.shown.as_str()).collect();
            out.field("invalid_env_names", &shown);
        }
        out.field("stdout_mode", &self.stdout_mode)
            .field("config", &self.config)
            .finish()
    }
}

/// The program for error messages (lossy UTF-8; never an argument or an env value).
pub(crate) fn display_program(program: &OsStr) -> String {
    program.to_string_lossy().into_owned()
}

/// Whether a host variable name is on the OS allowlist. Exact on Unix; ASCII case-insensitive on Windows, whose
/// variable names are case-insensitive (`Path`).
fn is_os_allowlisted(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    if cfg!(windows) {
        let upper = name.to_ascii_uppercase();
        return OS_ENV_ALLOWLIST.contains(&upper.as_str())
            || OS_ENV_ALLOWLIST_PREFIXES
                .iter()
                .any(|p| upper.starts_with(p));
    }
    OS_ENV_ALLOWLIST.contains(&name)
        || OS_ENV_ALLOWLIST_PREFIXES
            .iter()
            .any(|p| name.starts_with(p))
}

fn is_denied(name: &OsStr) -> bool {
    name.to_str().is_some_and(|n| ENV_DENYLIST.contains(&n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_allowlisted(name: &str, expect: bool) {
        assert_eq!(
            is_os_allowlisted(OsStr::new(name)) && !is_denied(OsStr::new(name)),
            expect,
            "{name}"
        );
    }

    #[test]
    fn allowlist_covers_os_defaults_and_lc_prefix_but_not_claudecode() {
        for name in [
            "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM",
            "TMPDIR", "TZ",
        ] {
            check_allowlisted(name, true);
        }
        for name in [
            "CLAUDECODE",
            "CARGO_PKG_NAME",
            "ANTHROPIC_API_KEY",
            "LC",
            "lc_all",
            "PATHX",
            "",
        ] {
            check_allowlisted(name, false);
        }
    }

    #[test]
    fn debug_shows_env_names_and_redacts_secret_args() {
        let mut cmd = Command::new("agent");
        cmd.arg("--model")
            .arg_redacted("token-123")
            .env("API_KEY", "value-456")
            .env("MODE", "plain-789");
        let shown = format!("{cmd:?}");
        assert!(
            shown.contains("API_KEY") && shown.contains("MODE") && shown.contains("--model"),
            "{shown}"
        );
        for secret in ["token-123", "value-456", "plain-789"] {
            assert!(!shown.contains(secret), "{secret} leaked in {shown}");
        }
        assert!(shown.contains("***"), "{shown}");
    }

    #[test]
    fn explicit_entries_win_over_inherited_in_any_order() {
        let mut cmd = Command::new("x");
        cmd.env("PATH", "/explicit")
            .inherit_os_env()
            .inherit_env(["PATH", "CLAUDECODE"]);
        assert_eq!(
            cmd.env.get(OsStr::new("PATH")).map(OsString::as_os_str),
            Some(OsStr::new("/explicit"))
        );
        assert!(!cmd.env.contains_key(OsStr::new("CLAUDECODE")));
        cmd.env("CLAUDECODE", "0");
        assert!(
            cmd.env_names().any(|n| n == "CLAUDECODE"),
            "explicit entries are honoured"
        );
    }

    #[test]
    fn new_starts_with_an_empty_environment() {
        assert_eq!(Command::new("x").env_names().count(), 0);
    }
}
