//! Endpoint start-up hazards: stale sockets, things that are not sockets, concurrent starters, descriptor
//! ownership on shutdown.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod support;

use agentwire_local_control::descriptor::{Descriptor, Endpoint, Token, write_descriptor};
use agentwire_local_control::endpoint::{EndpointError, Layout};
use agentwire_local_control::server::{Server, ServerConfig, ServerError};
use serde_json::json;
use support::*;

fn config(dir: &std::path::Path) -> ServerConfig {
    ServerConfig::new(dir, "0.1.0-test")
}

#[tokio::test]
async fn a_stale_socket_left_by_a_dead_owner_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), "deepchat").unwrap();
    agentwire_local_control::endpoint::prepare_private_dir(&layout.control_dir).unwrap();
    // A listener that is gone without unlinking its file: what a SIGKILLed host leaves behind.
    drop(std::os::unix::net::UnixListener::bind(&layout.socket_path).unwrap());
    assert!(layout.socket_path.exists());
    let server = Server::start(config(dir.path()), Shared::default())
        .await
        .unwrap();
    let result = Running::client_for(&server)
        .rpc(&request("r1", "test.echo", json!({})), TIMEOUT)
        .await;
    assert!(result.is_ok(), "{result:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_live_socket_of_someone_else_is_already_running_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), "deepchat").unwrap();
    agentwire_local_control::endpoint::prepare_private_dir(&layout.control_dir).unwrap();
    let other = std::os::unix::net::UnixListener::bind(&layout.socket_path).unwrap();
    let error = Server::start(config(dir.path()), Shared::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "already_running", "{error}");
    assert!(layout.socket_path.exists());
    drop(other);
}

#[tokio::test]
async fn a_non_socket_at_the_socket_path_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), "deepchat").unwrap();
    agentwire_local_control::endpoint::prepare_private_dir(&layout.control_dir).unwrap();
    std::fs::write(&layout.socket_path, b"precious").unwrap();
    let error = Server::start(config(dir.path()), Shared::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ServerError::Endpoint(EndpointError::NotASocket { .. })
        ),
        "{error}"
    );
    assert_eq!(error.code(), "not_a_socket");
    assert_eq!(std::fs::read(&layout.socket_path).unwrap(), b"precious");
}

#[tokio::test]
async fn of_two_concurrent_starters_one_wins_and_the_other_is_already_running() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = tokio::join!(
        Server::start(config(dir.path()), Shared::default()),
        Server::start(config(dir.path()), Shared::default()),
    );
    let (winner, loser) = match (first, second) {
        (Ok(winner), Err(loser)) | (Err(loser), Ok(winner)) => (winner, loser),
        (first, second) => panic!(
            "exactly one must win: {:?} / {:?}",
            first.err(),
            second.err()
        ),
    };
    assert_eq!(loser.code(), "already_running");
    // The winner still serves, with the descriptor it wrote.
    let result = Running::client_for(&winner)
        .rpc(&request("r1", "test.echo", json!({})), TIMEOUT)
        .await;
    assert!(result.is_ok());
    // A third starter while the winner runs is refused too, and does not disturb it.
    let third = Server::start(config(dir.path()), Shared::default())
        .await
        .unwrap_err();
    assert_eq!(third.code(), "already_running");
    assert!(
        Running::client_for(&winner)
            .rpc(&request("r2", "test.echo", json!({})), TIMEOUT)
            .await
            .is_ok()
    );
    winner.shutdown().await;
    // After a clean shutdown the data dir can be served again.
    let again = Server::start(config(dir.path()), Shared::default())
        .await
        .unwrap();
    again.shutdown().await;
}

#[tokio::test]
async fn shutdown_leaves_a_descriptor_that_is_not_ours() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(config(dir.path()), Shared::default())
        .await
        .unwrap();
    let path = server.layout().descriptor_path.clone();
    let mut other = server.descriptor().clone();
    other.token = Token::generate().unwrap();
    write_descriptor(&path, &other).unwrap();
    server.shutdown().await;
    assert!(
        path.exists(),
        "another start's descriptor survives our shutdown"
    );
}

#[test]
fn descriptor_writing_is_atomic_and_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("local-control.json");
    let endpoint = Endpoint::Unix {
        path: "/tmp/x.sock".to_owned(),
    };
    let descriptor = Descriptor::new("1.0", endpoint, 42, Token::generate().unwrap(), 7);
    write_descriptor(&path, &descriptor).unwrap();
    write_descriptor(&path, &descriptor).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("local-control.json")],
        "no temp file left behind"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "appVersion",
            "endpoint",
            "pid",
            "protocolVersion",
            "startedAt",
            "surfaceVersion",
            "token"
        ]
    );
    assert_eq!(
        value["endpoint"],
        json!({"kind": "unix", "path": "/tmp/x.sock"})
    );
}

#[test]
fn an_overlong_socket_path_falls_back_to_a_short_private_directory() {
    let long = std::path::PathBuf::from(format!("/tmp/{}", "d".repeat(120)));
    let layout = Layout::new(&long, "deepchat").unwrap();
    assert!(layout.socket_path.as_os_str().len() <= 100);
    assert_ne!(layout.socket_dir, layout.control_dir);
    let name = layout
        .socket_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let uid = rustix::process::getuid().as_raw();
    assert!(name.starts_with(&format!("deepchat-{uid}-")), "{name}");
    assert_eq!(name.len(), format!("deepchat-{uid}-").len() + 16);
    assert_eq!(
        layout.descriptor_path,
        long.join("local-control").join("local-control.json")
    );
    // Deterministic per data dir.
    assert_eq!(Layout::new(&long, "deepchat").unwrap(), layout);
}

/// Gives `path` to uid 65534 when we may (root, as in the CI container); reports whether it did.
fn give_away(path: &std::path::Path) -> bool {
    match rustix::fs::chown(path, Some(rustix::fs::Uid::from_raw(65_534)), None) {
        Ok(()) => true,
        Err(error) => {
            assert_eq!(
                error,
                rustix::io::Errno::PERM,
                "only a permission refusal is expected"
            );
            false
        }
    }
}

#[tokio::test]
async fn a_foreign_stale_socket_or_control_dir_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), "deepchat").unwrap();
    agentwire_local_control::endpoint::prepare_private_dir(&layout.control_dir).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&layout.socket_path).unwrap());
    if give_away(&layout.socket_path) {
        let error = Server::start(config(dir.path()), Shared::default())
            .await
            .unwrap_err();
        assert_eq!(error.code(), "foreign_socket", "{error}");
        assert!(layout.socket_path.exists());
    }
    std::fs::remove_file(&layout.socket_path).unwrap();
    if give_away(&layout.control_dir) {
        let error = Server::start(config(dir.path()), Shared::default())
            .await
            .unwrap_err();
        assert_eq!(error.code(), "directory_not_private", "{error}");
    }
}
