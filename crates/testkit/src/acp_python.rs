//! The official ACP Python SDK (`agent-client-protocol` on PyPI), installed for interop tests: a virtual
//! environment with the package, and the SDK's own `examples/` (an echo agent, an example agent and an example
//! client) taken from the same version's source distribution.
//!
//! [`install`] is what the interop tests call (and what `cargo xtask ci` may call before them): it needs `python3`
//! (3.10+, with `venv`) and network access to PyPI, and fails with a message saying which step failed, never
//! silently. An installation is reused when it is complete; a half-finished one is never used (everything is built
//! in a staging directory and renamed into place).
//!
//! Processes are run with `std::process::Command` here (like xtask): this is test tooling that runs the Python
//! toolchain synchronously before any agent is spawned; agents themselves are spawned through agentwire-process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The SDK version the interop tests are run against (PyPI `agent-client-protocol`).
pub const SDK_VERSION: &str = "0.12.1";

/// The PyPI package name.
pub const SDK_PACKAGE: &str = "agent-client-protocol";

/// An installed SDK.
#[derive(Clone, Debug)]
pub struct AcpPythonSdk {
    /// The installation directory (`<target>/acp-python-sdk-<version>`).
    pub dir: PathBuf,
    /// The virtual environment's Python interpreter, with the SDK importable as `acp`.
    pub python: PathBuf,
    /// The SDK's `examples/` directory (`echo_agent.py`, `agent.py`, `client.py`, …) and its `LICENSE`.
    pub examples: PathBuf,
    /// The SDK version installed ([`SDK_VERSION`]).
    pub version: &'static str,
}

impl AcpPythonSdk {
    /// The path of one of the SDK's examples, e.g. `echo_agent.py`.
    pub fn example(&self, name: &str) -> PathBuf {
        self.examples.join(name)
    }
}

/// The default installation directory: `acp-python-sdk-<version>` in the target directory of the running test
/// executable (`target/<profile>/deps/<test>` → `target/`).
///
/// # Panics
/// When the running executable is not inside a cargo target directory.
pub fn default_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("test executable lives in target/<profile>/deps");
    target.join(format!("acp-python-sdk-{SDK_VERSION}"))
}

/// Installs the SDK into `dir` unless a complete installation is there: `python3 -m venv`, `pip install
/// agent-client-protocol==<SDK_VERSION>`, and the examples from `pip download --no-binary :all:` of the same version.
/// The interpreter is `$ACP_PYTHON` when set, else `python3`.
///
/// # Errors
/// A message naming the failed step and the tool's own output (e.g. pip unable to reach PyPI).
pub fn install(dir: &Path) -> Result<AcpPythonSdk, String> {
    let sdk = AcpPythonSdk {
        dir: dir.to_path_buf(),
        python: dir.join("venv/bin/python"),
        examples: dir.join("examples"),
        version: SDK_VERSION,
    };
    if dir.join("complete").is_file() {
        return Ok(sdk);
    }
    let parent = dir
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", dir.display()))?;
    std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let staging = parent.join(format!(
        ".{}.staging-{}",
        dir.file_name()
            .map_or_else(|| "acp-python-sdk".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&staging);
    let built = build(&staging);
    if let Err(error) = built {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(error);
    }
    // Another process may have finished first: then its installation is used and ours discarded.
    if std::fs::rename(&staging, dir).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
        if !dir.join("complete").is_file() {
            return Err(format!(
                "could not move the SDK installation into {}",
                dir.display()
            ));
        }
    }
    Ok(sdk)
}

fn build(staging: &Path) -> Result<(), String> {
    let python = std::env::var_os("ACP_PYTHON").unwrap_or_else(|| "python3".into());
    let venv = staging.join("venv");
    run(
        "create the virtual environment (python3 -m venv; is python3 with venv installed?)",
        command(&python).arg("-m").arg("venv").arg(&venv),
    )?;
    // The venv is used through its interpreter only (`python -m pip`), so the staging directory can be renamed.
    let venv_python = venv.join("bin/python");
    let requirement = format!("{SDK_PACKAGE}=={SDK_VERSION}");
    run(
        &format!("pip install {requirement} from PyPI (is PyPI reachable?)"),
        command(&venv_python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--quiet",
            ])
            .arg(&requirement),
    )?;
    let sdist = staging.join("sdist");
    run(
        &format!(
            "pip download the {requirement} source distribution from PyPI (is PyPI reachable?)"
        ),
        command(&venv_python)
            .args([
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
            ])
            .arg(&sdist)
            .arg(&requirement),
    )?;
    // Extract `examples/*.py` and `LICENSE` from the sdist with Python's tarfile (no other tool needed).
    let extract = r#"
import pathlib, sys, tarfile
sdist, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
archives = sorted(sdist.glob("*.tar.gz"))
if len(archives) != 1:
    sys.exit(f"expected one source archive in {sdist}, found {archives}")
out.mkdir(parents=True)
with tarfile.open(archives[0]) as tar:
    for member in tar.getmembers():
        parts = pathlib.PurePosixPath(member.name).parts
        wanted = (len(parts) == 3 and parts[1] == "examples" and parts[2].endswith(".py")) or parts[1:] == ("LICENSE",)
        if member.isfile() and wanted:
            (out / parts[-1]).write_bytes(tar.extractfile(member).read())
for needed in ("echo_agent.py", "agent.py", "client.py"):
    if not (out / needed).is_file():
        sys.exit(f"the source distribution has no examples/{needed}")
"#;
    run(
        "extract the SDK's examples from its source distribution",
        command(&venv_python)
            .arg("-c")
            .arg(extract)
            .arg(&sdist)
            .arg(staging.join("examples")),
    )?;
    let version = command(&venv_python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('agent-client-protocol'))",
        ])
        .output()
        .map_err(|e| format!("asking the installed SDK's version: {e}"))?;
    let installed = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    if installed != SDK_VERSION {
        return Err(format!(
            "installed {SDK_PACKAGE} is {installed:?}, expected {SDK_VERSION}"
        ));
    }
    std::fs::write(
        staging.join("complete"),
        format!("{SDK_PACKAGE} {SDK_VERSION}\n"),
    )
    .map_err(|e| format!("marking the installation complete: {e}"))
}

#[allow(clippy::disallowed_methods)] // Test tooling, like xtask: see the module docs.
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    Command::new(program)
}

fn run(step: &str, command: &mut Command) -> Result<Output, String> {
    let output = command
        .output()
        .map_err(|e| format!("could not {step}: {e}"))?;
    if output.status.success() {
        return Ok(output);
    }
    let tail = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    Err(format!(
        "could not {step}: {}\n{}\n{}",
        output.status,
        tail(&output.stdout),
        tail(&output.stderr)
    ))
}
