//! Spawning: typed spawn errors with stable codes, and the allowlisted environment, with real children.

mod common;

use std::os::unix::fs::PermissionsExt;

use agentwire_process::{Command, OS_ENV_ALLOWLIST, SpawnError};
use common::{guard, read_to_end, sh};

/// Spawns `cmd` and checks the error's code, that its message names `program` and never leaks `secret`.
fn check_spawn_error(cmd: &mut Command, program: &str, expect_code: &str) {
    let secret = "hunter2-secret-value";
    cmd.env("AGENTWIRE_TEST_SECRET", secret);
    let err = match cmd.spawn() {
        Err(err) => err,
        Ok(_) => panic!("spawning {program} should fail with {expect_code}"),
    };
    assert_eq!(err.code(), expect_code, "{err}");
    assert_eq!(err.program(), program);
    let (message, debug) = (err.to_string(), format!("{err:?}"));
    assert!(message.contains(program), "{message}");
    assert!(
        !message.contains(secret) && !debug.contains(secret),
        "secret leaked: {message} / {debug}"
    );
    assert_eq!(
        message,
        message
            .to_lowercase()
            .replace(&program.to_lowercase(), program),
        "lowercase message"
    );
}

#[tokio::test]
async fn missing_executable_is_executable_not_found() {
    check_spawn_error(
        &mut Command::new("/nonexistent/agentwire-prog"),
        "/nonexistent/agentwire-prog",
        "executable_not_found",
    );
    let mut on_path = Command::new("agentwire-no-such-program");
    on_path.inherit_os_env();
    check_spawn_error(
        &mut on_path,
        "agentwire-no-such-program",
        "executable_not_found",
    );
}

#[tokio::test]
async fn file_without_execute_bit_or_directory_is_not_executable() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("agent.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = script.to_str().unwrap().to_owned();
    check_spawn_error(&mut Command::new(&script), &script, "not_executable");

    let dir_path = dir.path().to_str().unwrap().to_owned();
    check_spawn_error(&mut Command::new(&dir_path), &dir_path, "not_executable");
}

#[tokio::test]
async fn missing_working_directory_is_reported_as_such() {
    let mut cmd = Command::new("/bin/sh");
    cmd.current_dir("/nonexistent/agentwire-dir");
    check_spawn_error(&mut cmd, "/bin/sh", "working_dir_not_found");
}

#[test]
fn spawn_outside_a_runtime_is_a_typed_error() {
    check_spawn_error(&mut Command::new("/bin/sh"), "/bin/sh", "no_tokio_runtime");
}

#[tokio::test]
async fn executable_with_an_exec_bit_runs_from_its_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("agent.sh");
    std::fs::write(&script, "#!/bin/sh\npwd\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = Command::new("./agent.sh")
        .current_dir(dir.path())
        .inherit_os_env()
        .spawn()
        .expect("spawn");
    let (out, _) = read_to_end(&mut child.take_stdout().expect("stdout")).await;
    let expected = format!("{}\n", dir.path().canonicalize().unwrap().display());
    assert_eq!(String::from_utf8_lossy(&out), expected);
}

/// Runs `env` via `cmd` and returns the variable names the child saw.
async fn child_env_names(mut cmd: Command) -> Vec<String> {
    let mut child = cmd.spawn().expect("spawn");
    let (out, _) = read_to_end(&mut child.take_stdout().expect("stdout")).await;
    assert!(guard("wait", child.wait()).await.success());
    String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k.to_owned())
        .collect()
}

#[tokio::test]
async fn environment_holds_only_allowlisted_and_explicit_variables() {
    // Set by `cargo test` in this process, and on no allowlist: it must not reach the child.
    assert!(
        std::env::var_os("CARGO_MANIFEST_DIR").is_some(),
        "precondition: run under cargo test"
    );
    assert!(
        std::env::var_os("PATH").is_some(),
        "precondition: PATH is set"
    );

    let mut cmd = Command::new("env");
    cmd.inherit_os_env().env("AGENTWIRE_EXPLICIT", "1");
    let names = child_env_names(cmd).await;
    assert!(names.iter().any(|n| n == "PATH"), "{names:?}");
    assert!(names.iter().any(|n| n == "AGENTWIRE_EXPLICIT"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("CARGO")),
        "host variables leaked: {names:?}"
    );
    for name in &names {
        let allowed = OS_ENV_ALLOWLIST.contains(&name.as_str())
            || name.starts_with("LC_")
            || name == "AGENTWIRE_EXPLICIT";
        assert!(allowed, "{name} is neither allowlisted nor explicit");
    }

    let mut named = Command::new("env");
    named.inherit_env(["CARGO_PKG_NAME", "AGENTWIRE_UNSET_VARIABLE"]);
    assert_eq!(
        child_env_names(named).await,
        ["CARGO_PKG_NAME"],
        "inherit_env copies exactly the named, set variables"
    );
}

#[tokio::test]
async fn a_new_command_starts_with_an_empty_environment() {
    assert_eq!(
        child_env_names(Command::new("/usr/bin/env")).await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn arguments_are_passed_verbatim_without_a_shell() {
    let tricky = ["$HOME", "a b", "'q'", "; echo pwned", "*", "--flag=-x", ""];
    let mut cmd = sh(r#"for a in "$@"; do printf '[%s]' "$a"; done"#);
    cmd.arg("sh").args(tricky);
    let mut child = cmd.spawn().expect("spawn");
    let (out, _) = read_to_end(&mut child.take_stdout().expect("stdout")).await;
    assert_eq!(
        String::from_utf8_lossy(&out),
        "[$HOME][a b]['q'][; echo pwned][*][--flag=-x][]"
    );
}

#[test]
fn every_spawn_error_has_a_stable_code() {
    let program = || "p".to_owned();
    let cases = [
        (
            SpawnError::NotFound { program: program() },
            "executable_not_found",
        ),
        (
            SpawnError::PermissionDenied { program: program() },
            "permission_denied",
        ),
        (
            SpawnError::NotExecutable { program: program() },
            "not_executable",
        ),
        (
            SpawnError::WorkingDirNotFound {
                program: program(),
                dir: "d".into(),
            },
            "working_dir_not_found",
        ),
        (
            SpawnError::WorkingDirNotADirectory {
                program: program(),
                dir: "d".into(),
            },
            "working_dir_not_a_directory",
        ),
        (
            SpawnError::InvalidEnvName {
                program: program(),
                name: "A=***".into(),
                reason: "the name contains '='",
            },
            "invalid_env_name",
        ),
        (
            SpawnError::NoRuntime { program: program() },
            "no_tokio_runtime",
        ),
        (
            SpawnError::Io {
                program: program(),
                source: std::io::Error::other("x"),
            },
            "spawn_failed",
        ),
    ];
    for (err, code) in cases {
        assert_eq!(err.code(), code, "{err}");
    }
}

#[tokio::test]
async fn file_with_an_unknown_format_is_not_executable() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("garbage");
    std::fs::write(&binary, [0x7f, b'E', b'L', b'F', 0, 0, 0, 0, 1, 2, 3]).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = binary.to_str().unwrap().to_owned();
    check_spawn_error(&mut Command::new(&binary), &binary, "not_executable");
}

#[tokio::test]
async fn script_with_a_missing_interpreter_is_interpreter_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("agent");
    std::fs::write(&script, "#!/nonexistent/agentwire-interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.to_str().unwrap().to_owned();
    check_spawn_error(&mut Command::new(&script), &script, "interpreter_not_found");
}

/// Passes as is; [`claudecode_in_the_host_environment_never_reaches_a_child`] re-runs it with `CLAUDECODE=1` set in
/// the host environment, which this process cannot set on itself (`set_var` is unsafe and the workspace denies it).
#[tokio::test]
async fn inherit_helpers_never_pass_claudecode() {
    let host_value = std::env::var("CLAUDECODE").unwrap_or_default();
    let mut cmd = Command::new("env");
    cmd.inherit_os_env().inherit_env(["CLAUDECODE", "PATH"]);
    let names = child_env_names(cmd).await;
    assert!(names.iter().any(|n| n == "PATH"), "{names:?}");
    assert!(!names.iter().any(|n| n == "CLAUDECODE"), "{names:?}");
    println!("inner-check host CLAUDECODE={host_value:?}");
}

#[tokio::test]
async fn claudecode_in_the_host_environment_never_reaches_a_child() {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "inherit_helpers_never_pass_claudecode",
        "--nocapture",
        "--test-threads=1",
    ])
    .inherit_os_env()
    .env("CLAUDECODE", "1");
    let mut child = cmd.spawn().unwrap();
    let (out, _) = read_to_end(&mut child.take_stdout().unwrap()).await;
    let out = String::from_utf8_lossy(&out);
    assert!(guard("inner test", child.wait()).await.success(), "{out}");
    assert!(
        out.contains(r#"inner-check host CLAUDECODE="1""#),
        "the inner test ran with CLAUDECODE=1: {out}"
    );
    assert!(out.contains("1 passed"), "{out}");
}

#[tokio::test]
async fn env_remove_wins_over_the_inherit_helpers_in_either_order() {
    assert!(
        std::env::var_os("HOME").is_some(),
        "precondition: HOME is set"
    );
    let mut before = Command::new("env");
    before
        .env_remove("HOME")
        .inherit_os_env()
        .inherit_env(["HOME"]);
    let mut after = Command::new("env");
    after
        .inherit_os_env()
        .inherit_env(["HOME"])
        .env_remove("HOME");
    for cmd in [before, after] {
        assert!(!cmd.env_names().any(|n| n == "HOME"), "{cmd:?}");
        let names = child_env_names(cmd).await;
        assert!(names.iter().any(|n| n == "PATH"), "{names:?}");
        assert!(!names.iter().any(|n| n == "HOME"), "{names:?}");
    }
    // The last explicit call wins: an `env` after the removal sets the name again.
    let mut again = Command::new("env");
    again.env_remove("HOME").env("HOME", "/explicit");
    assert_eq!(child_env_names(again).await, ["HOME"]);
}

/// Spawns `cmd`, which was given the invalid environment name, and checks the error and that `leak` (the part of
/// the name after `=`, or the value) appears neither in the error nor in the command's `Debug`.
fn check_invalid_env_name(mut cmd: Command, expect_name: &str, expect_reason: &str, leak: &str) {
    let debug = format!("{cmd:?}");
    assert!(!debug.contains(leak), "{leak} leaked in {debug}");
    assert!(debug.contains(&format!("{expect_name:?}")), "{debug}");
    let err = match cmd.spawn() {
        Err(err) => err,
        Ok(_) => panic!("an invalid environment name must fail the spawn"),
    };
    assert_eq!(err.code(), "invalid_env_name", "{err}");
    match &err {
        SpawnError::InvalidEnvName { name, reason, .. } => {
            assert_eq!((name.as_str(), *reason), (expect_name, expect_reason));
        }
        other => panic!("expected InvalidEnvName, got {other:?}"),
    }
    let (message, debug) = (err.to_string(), format!("{err:?}"));
    assert!(message.contains("/usr/bin/env"), "{message}");
    assert!(
        !message.contains(leak) && !debug.contains(leak),
        "{leak} leaked: {message} / {debug}"
    );
}

#[tokio::test]
async fn invalid_env_names_fail_the_spawn_without_echoing_the_value() {
    let mut cmd = Command::new("/usr/bin/env");
    cmd.env("PATH=/evil:/bin", "x-value");
    check_invalid_env_name(cmd, "PATH=***", "the name contains '='", "/evil");
    let mut cmd = Command::new("/usr/bin/env");
    cmd.env("TOKEN=sk-in-key", "");
    check_invalid_env_name(cmd, "TOKEN=***", "the name contains '='", "sk-in-key");
    let mut cmd = Command::new("/usr/bin/env");
    cmd.env("", "empty-name-value");
    check_invalid_env_name(cmd, "", "the name is empty", "empty-name-value");
    let mut cmd = Command::new("/usr/bin/env");
    cmd.envs([("GOOD", "1"), ("NUL\0SECRET", "nul-value")]);
    check_invalid_env_name(cmd, "NUL\\0***", "the name contains a nul byte", "SECRET");
    // A valid name with `=` in its value is fine.
    let mut cmd = Command::new("/usr/bin/env");
    cmd.env("OPTS", "a=b");
    assert_eq!(child_env_names(cmd).await, ["OPTS"]);
}

#[tokio::test]
async fn bare_program_name_that_is_a_directory_on_path_is_not_executable() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agentwire-dir-prog")).unwrap();
    let mut cmd = Command::new("agentwire-dir-prog");
    cmd.env("PATH", dir.path());
    check_spawn_error(&mut cmd, "agentwire-dir-prog", "not_executable");

    // A file of that name without an exec bit further on the PATH does not change the verdict.
    let other = tempfile::tempdir().unwrap();
    let script = other.path().join("agentwire-dir-prog");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = std::env::join_paths([dir.path(), other.path()]).unwrap();
    let mut cmd = Command::new("agentwire-dir-prog");
    cmd.env("PATH", path);
    check_spawn_error(&mut cmd, "agentwire-dir-prog", "not_executable");
}

#[tokio::test]
async fn working_dir_that_is_a_file_is_working_dir_not_a_directory() {
    // `/dev/null` exists on every Unix and is not a directory (a tempdir path would break the lowercase check).
    let mut cmd = Command::new("/bin/sh");
    cmd.current_dir("/dev/null");
    check_spawn_error(&mut cmd, "/bin/sh", "working_dir_not_a_directory");
    let err = Command::new("/bin/sh")
        .current_dir("/dev/null")
        .spawn()
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "working directory is not a directory: /dev/null (running /bin/sh)"
    );

    // Below a file: the directory does not exist.
    let mut cmd = Command::new("/bin/sh");
    cmd.current_dir("/dev/null/sub");
    check_spawn_error(&mut cmd, "/bin/sh", "working_dir_not_found");

    // A program path through a file names no executable.
    check_spawn_error(
        &mut Command::new("/dev/null/prog"),
        "/dev/null/prog",
        "executable_not_found",
    );
}
