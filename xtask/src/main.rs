//! Workspace automation behind `cargo xtask` (the alias lives in `.cargo/config.toml`).
//!
//! - `cargo xtask ci`: what CI runs — installs the OS tools the tests need when missing (Debian packages), then
//!   `cargo fmt --check`, `cargo clippy -D warnings`, `cargo test --workspace`, then every bench target once in the
//!   test profile (`cargo test --workspace --bench '*'`: criterion's test mode, the custom benches' smoke mode).
//! - `cargo xtask bench`: every criterion and custom bench in the workspace (after building the binaries the custom
//!   benches spawn), summarized with ratios into `docs/benchmarks.md`.
//! - `cargo xtask fuzz <target>|all --seconds N`: a `cargo fuzz` target (or every one, one after the other) for N
//!   seconds each; see `docs/fuzzing.md`.
//! - `cargo xtask conformance`: `awp-host check` against the bundled and fixture agents, or any agent CLI.
//!
//! xtask runs build tools (cargo, git), never agents, so it is the one place besides `agentwire-process` that may
//! build a `std::process::Command` directly.
#![allow(clippy::disallowed_methods)]

mod bench_report;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    about = "agentwire workspace automation",
    version
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Installs missing OS tools the tests use (jq, uuidgen, tmux, tesseract with English data, poppler), then format check, clippy with -D warnings, and the
    /// whole test suite: exactly what CI runs.
    Ci,
    /// Run every benchmark (release build) and write the summary with ratios to docs/benchmarks.md.
    Bench {
        /// Shorter warm-up and measurement (noisier numbers, about a third of the time).
        #[arg(long)]
        quick: bool,
        /// Only summarize the results already in target/criterion and target/bench-results.
        #[arg(long)]
        report_only: bool,
    },
    /// Run a cargo-fuzz target, or `all` of them one after the other, for a bounded time each (needs
    /// `cargo install cargo-fuzz`; runs on stable through RUSTC_BOOTSTRAP). See docs/fuzzing.md.
    Fuzz {
        /// The fuzz target (see fuzz/Cargo.toml), or `all`.
        #[arg(value_parser = FUZZ_TARGETS.iter().copied().chain(["all"]).collect::<Vec<_>>())]
        target: String,
        /// How long to fuzz each target, in seconds (at least 1: libFuzzer reads 0 as "no limit", so 0 is
        /// refused).
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Where cargo-fuzz builds (default: fuzz/target).
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
    /// Check agent CLIs against the protocols with `awp-host check`.
    ///
    /// With no command, checks the bundled `awp-agent` (awp-jsonl), the fixture agent in stream-json mode and the
    /// ACP echo fixture. With `-- CMD ARGS...`, checks that agent CLI with the given protocol.
    Conformance {
        /// Protocol of the agent given after `--`.
        #[arg(long, default_value = "awp-jsonl", value_parser = ["awp-jsonl", "stream-json", "acp"])]
        protocol: String,
        /// The agent command line (absolute executable path first).
        #[arg(last = true)]
        command: Vec<String>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    match cli.task {
        Task::Ci => ci(&root),
        Task::Bench { quick, report_only } => bench(&root, quick, report_only),
        Task::Fuzz {
            target,
            seconds,
            target_dir,
        } => fuzz(&root, &target, seconds, target_dir.as_deref()),
        Task::Conformance { protocol, command } => conformance(&root, &protocol, &command),
    }
}

fn workspace_root() -> PathBuf {
    // CARGO_MANIFEST_DIR is <root>/xtask at build time.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The cargo target directory: `CARGO_TARGET_DIR` (relative to the workspace root) or `<root>/target`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs `cmd` in `root`, echoing it first; fails with the command line when it exits non-zero.
fn run(root: &Path, mut cmd: Command) -> Result<()> {
    cmd.current_dir(root);
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n$ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

/// OS tools the tests run, with the Debian package that provides each.
///
/// `jq` and `uuidgen` are what the Kandev seed's example `agent.sh` needs (agentctl's tests run it unmodified);
/// `tmux` is the terminal awp-host's interactive-session tests type into (`bins/awp-host/tests/interactive.rs`);
/// `file` identifies the built-in provider's PNG, WAV and AVI output (`crates/provider/tests/builtin.rs`);
/// `tesseract` (with its English language data) and poppler's `pdftoppm`/`pdfinfo` are the offline OCR engine the
/// host runs (`crates/host/tests/control_ocr.rs`, `bins/awp-host/tests/serve_ocr.rs`).
const OS_TOOLS: &[(&str, &[&str])] = &[
    ("jq", &["jq"]),
    ("uuidgen", &["uuid-runtime"]),
    ("tmux", &["tmux"]),
    ("file", &["file"]),
    ("tesseract", &["tesseract-ocr", "tesseract-ocr-eng"]),
    ("pdftoppm", &["poppler-utils"]),
    ("pdfinfo", &["poppler-utils"]),
    ("file", &["file"]),
];

/// Installs the Debian packages of the [`OS_TOOLS`] that are missing from `PATH`, with `apt-get` (as root, or through
/// `sudo`). On a machine without `apt-get` it fails naming what to install.
fn ensure_os_tools(root: &Path) -> Result<()> {
    let mut missing: Vec<&str> = OS_TOOLS
        .iter()
        .filter(|(tool, _)| !on_path(tool))
        .flat_map(|(_, packages)| packages.iter().copied())
        .collect();
    if on_path("tesseract") && !tesseract_has_english() {
        missing.push("tesseract-ocr-eng");
    }
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    if !on_path("apt-get") {
        bail!(
            "the tests need these OS packages, and apt-get is not here to install them: {}",
            missing.join(" ")
        );
    }
    let as_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|out| out.stdout.starts_with(b"0"))
        .unwrap_or(false);
    let apt = |args: &[&str]| {
        let mut cmd = if as_root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    };
    run(root, apt(&["update", "-q"]))?;
    let mut install = apt(&["install", "-y", "-q", "--no-install-recommends"]);
    install.args(&missing);
    run(root, install)
}

/// Whether `tesseract --list-langs` lists `eng` (the language the OCR tests read).
fn tesseract_has_english() -> bool {
    Command::new("tesseract")
        .arg("--list-langs")
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .skip(1)
                .any(|line| line.trim() == "eng")
        })
        .unwrap_or(false)
}

/// Whether an executable named `tool` is in one of `PATH`'s directories.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

fn ci(root: &Path) -> Result<()> {
    ensure_os_tools(root)?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(root, fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run(root, clippy)?;
    let mut test = cargo();
    test.args(["test", "--workspace"]);
    run(root, test)?;
    // Every `[[bench]]` target once, in the test profile, so benches keep compiling and their baseline checks keep
    // holding: without `--bench`, criterion runs each benchmark once (its test mode) and the custom benches do a
    // smoke run (`agentwire_testkit::bench::smoke_mode`) that writes no result. `--bench '*'` rather than
    // `--benches`, which would also rerun the lib/bin unit tests.
    let mut benches = cargo();
    benches.args(["test", "--workspace", "--bench", "*"]);
    run(root, benches)?;
    eprintln!("\nxtask ci: fmt, clippy, tests and bench smoke runs passed");
    Ok(())
}

/// Packages whose binaries the custom benches spawn: `awp-fixture` (awp-host's and agentctl's benches), `deepchat`
/// (awp-host's `control` bench).
const BENCH_BINARIES: &[&str] = &["agentwire-fixture-agents", "deepchat"];

fn bench(root: &Path, quick: bool, report_only: bool) -> Result<()> {
    // Criterion writes under the target directory, which CARGO_TARGET_DIR may move.
    let target = target_dir(root);
    let criterion_dir = target.join("criterion");
    let fragments_dir = target.join("bench-results");
    let mut command_line = String::from("cargo xtask bench");
    if quick {
        command_line.push_str(" --quick");
    }
    if !report_only {
        // Stale results from earlier runs must not be reported as this run's.
        for dir in [&criterion_dir, &fragments_dir] {
            if dir.exists() {
                std::fs::remove_dir_all(dir)
                    .with_context(|| format!("removing {}", dir.display()))?;
            }
        }
        std::fs::create_dir_all(&fragments_dir)?;
        // Binaries the custom benches run but that no bench target of their own package builds.
        let mut build = cargo();
        build.args(["build", "--release"]);
        for package in BENCH_BINARIES {
            build.args(["-p", package]);
        }
        run(root, build)?;
        let mut cmd = cargo();
        // `--bench '*'`: every `[[bench]]` target and nothing else. (`--benches` also selects the libtest harnesses
        // of libs and bins, which have `bench = true` by default and reject criterion's flags.)
        cmd.args(["bench", "--workspace", "--bench", "*", "--"]);
        if quick {
            cmd.args(["--warm-up-time", "0.5", "--measurement-time", "1"]);
        }
        cmd.env("AGENTWIRE_BENCH_OUT", &fragments_dir);
        if quick {
            cmd.env("AGENTWIRE_BENCH_QUICK", "1");
            // crates/host/benches/tasks.rs reads its own count (default 200).
            cmd.env("AGENTWIRE_BENCH_TASKS", "60");
        }
        run(root, cmd)?;
    }
    let machine = machine_description();
    let report = bench_report::render(&criterion_dir, &fragments_dir, &command_line, &machine)?;
    let out = root.join("docs").join("benchmarks.md");
    std::fs::write(&out, report).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn machine_description() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "rustc (unknown version)".to_string());
    // Other work on the machine skews every number; say how busy it was when the report was written.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .map(|five| format!(", load average {five} over the last 5 minutes"))
        .unwrap_or_default();
    format!(
        "{cpus} CPUs ({model}), {rustc}, {} {}{load}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// The cargo-fuzz targets in `fuzz/Cargo.toml`, in the order `cargo xtask fuzz all` runs them.
const FUZZ_TARGETS: &[&str] = &[
    "jsonl",
    "jsonrpc",
    "awp",
    "agentctl_router",
    "acp",
    "local_control",
    "cli_driver",
];

/// Refuses `--seconds 0`: it would become `-max_total_time=0`, which libFuzzer reads as "run for ever".
fn check_fuzz_seconds(seconds: u64) -> Result<()> {
    if seconds == 0 {
        bail!(
            "--seconds 0 would fuzz for ever (libFuzzer reads -max_total_time=0 as no limit): give at least 1"
        );
    }
    Ok(())
}

fn fuzz(root: &Path, target: &str, seconds: u64, target_dir: Option<&Path>) -> Result<()> {
    check_fuzz_seconds(seconds)?;
    let probe = cargo().args(["fuzz", "--version"]).output();
    if !matches!(probe, Ok(ref o) if o.status.success()) {
        bail!(
            "cargo-fuzz is not installed: run `cargo install cargo-fuzz` first (it runs on stable here through \
             RUSTC_BOOTSTRAP=1)"
        );
    }
    let targets: Vec<&str> = if target == "all" {
        FUZZ_TARGETS.to_vec()
    } else {
        vec![target]
    };
    let mut failed = Vec::new();
    for target in targets {
        eprintln!("xtask: fuzzing `{target}` for {seconds} s");
        let mut cmd = cargo();
        cmd.args(["fuzz", "run", "--fuzz-dir", "fuzz", "--sanitizer", "none"]);
        if let Some(dir) = target_dir {
            cmd.arg("--target-dir").arg(dir);
        }
        // The working corpus (gitignored, grows) first: libFuzzer adds new inputs there; then the committed seeds.
        let corpus = root.join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus)
            .with_context(|| format!("could not create {}", corpus.display()))?;
        cmd.arg(target).arg(&corpus);
        let seeds = root.join("fuzz/seeds").join(target);
        if seeds.is_dir() {
            cmd.arg(seeds);
        }
        cmd.arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg("-print_final_stats=1")
            // cargo-fuzz passes -Z flags; the stable toolchain accepts them with RUSTC_BOOTSTRAP.
            .env("RUSTC_BOOTSTRAP", "1");
        if let Err(error) = run(root, cmd) {
            eprintln!("xtask: fuzz target `{target}` failed: {error:#}");
            failed.push(target);
        }
    }
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {} (crash inputs are in fuzz/artifacts/<target>/)",
            failed.join(", ")
        );
    }
    Ok(())
}

fn conformance(root: &Path, protocol: &str, command: &[String]) -> Result<()> {
    let mut build = cargo();
    build.args(["build", "--release", "--bins", "--workspace"]);
    run(root, build)?;
    let bin_dir = target_dir(root).join("release");
    let host = bin_dir.join("awp-host");
    let checks: Vec<(String, Vec<String>)> = if command.is_empty() {
        let bin = |name: &str| bin_dir.join(name).display().to_string();
        vec![
            ("awp-jsonl".into(), vec![bin("awp-agent")]),
            (
                "stream-json".into(),
                vec![bin("awp-fixture"), "--mode".into(), "stream-json".into()],
            ),
            (
                "acp".into(),
                vec![bin("acp-fixture"), "--mode".into(), "echo".into()],
            ),
        ]
    } else {
        vec![(protocol.to_string(), command.to_vec())]
    };
    let mut failed = Vec::new();
    for (protocol, argv) in &checks {
        let mut cmd = Command::new(&host);
        cmd.args(["check", "--protocol", protocol, "--"]).args(argv);
        if let Err(err) = run(root, cmd) {
            eprintln!("{err:#}");
            failed.push(format!("{protocol}: {}", argv.join(" ")));
        }
    }
    if !failed.is_empty() {
        bail!("conformance failed for: {}", failed.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzzing_for_zero_seconds_is_refused() {
        let err = check_fuzz_seconds(0).expect_err("refused");
        assert!(err.to_string().contains("--seconds 0"), "{err}");
        assert!(check_fuzz_seconds(1).is_ok());
    }
}
