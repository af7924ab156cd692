//! Client discovery refuses every unsafe or stale descriptor with a typed error (DeepChat `src/cli/discovery.ts`).

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agentwire_local_control::descriptor::{
    DiscoveryError, DiscoveryOptions, discover, discover_at, process_alive,
};
use agentwire_local_control::envelope::ErrorCode;
use serde_json::{Value, json};

struct Fixture {
    dir: tempfile::TempDir,
    socket: PathBuf,
    _listener: std::os::unix::net::UnixListener,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("local-control");
        std::fs::create_dir(&control).unwrap();
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = control.join("control.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
        Fixture {
            dir,
            socket,
            _listener: listener,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir
            .path()
            .join("local-control")
            .join("local-control.json")
    }

    fn good(&self) -> Value {
        json!({"protocolVersion":1,"surfaceVersion":2,"appVersion":"1.2.3",
               "endpoint":{"kind":"unix","path":self.socket.to_str().unwrap()},
               "pid":std::process::id(),"token":"A".repeat(43),"startedAt":1_764_583_200_000u64})
    }

    fn write(&self, bytes: &[u8]) {
        write_private(&self.path(), bytes);
    }

    fn write_json(&self, value: &Value) {
        self.write(&serde_json::to_vec(value).unwrap());
    }

    fn check(&self) -> Result<(), String> {
        discover_at(&self.path(), DiscoveryOptions::default())
            .map(|_| ())
            .map_err(|error| error.check().to_owned())
    }
}

fn write_private(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
}

#[test]
fn a_good_descriptor_is_accepted() {
    let fixture = Fixture::new();
    fixture.write_json(&fixture.good());
    let descriptor = discover(fixture.dir.path()).unwrap();
    assert_eq!(descriptor.app_version, "1.2.3");
}

#[test]
fn each_unsafe_descriptor_is_refused_with_its_own_check() {
    let fixture = Fixture::new();
    assert_eq!(fixture.check(), Err("descriptor_missing".to_owned()));

    // Symlink to a good descriptor.
    let real = fixture.dir.path().join("real.json");
    write_private(&real, &serde_json::to_vec(&fixture.good()).unwrap());
    std::os::unix::fs::symlink(&real, fixture.path()).unwrap();
    assert_eq!(fixture.check(), Err("descriptor_symlink".to_owned()));
    std::fs::remove_file(fixture.path()).unwrap();

    // A directory.
    std::fs::create_dir(fixture.path()).unwrap();
    assert_eq!(fixture.check(), Err("descriptor_not_regular".to_owned()));
    std::fs::remove_dir(fixture.path()).unwrap();

    // Size: exactly 64 KiB of padding-valid JSON is allowed through the size check, one more byte is not.
    let mut padded = serde_json::to_vec(&fixture.good()).unwrap();
    padded.resize(64 * 1024, b' ');
    fixture.write(&padded);
    assert_eq!(fixture.check(), Ok(()));
    padded.push(b' ');
    fixture.write(&padded);
    assert_eq!(fixture.check(), Err("descriptor_size".to_owned()));
    fixture.write(b"");
    assert_eq!(fixture.check(), Err("descriptor_size".to_owned()));

    // Group or other bits.
    for mode in [0o640, 0o604, 0o620] {
        fixture.write_json(&fixture.good());
        std::fs::set_permissions(fixture.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(
            fixture.check(),
            Err("descriptor_mode".to_owned()),
            "{mode:o}"
        );
    }

    fixture.write(b"not json");
    assert_eq!(fixture.check(), Err("descriptor_malformed".to_owned()));
    fixture.write_json(&json!({"protocolVersion":"1","surfaceVersion":2}));
    assert_eq!(fixture.check(), Err("descriptor_malformed".to_owned()));
}

#[test]
fn the_version_is_checked_before_the_full_shape() {
    let fixture = Fixture::new();
    fixture.write_json(&json!({"protocolVersion":2,"surfaceVersion":2,"whatever":true}));
    let error = discover_at(&fixture.path(), DiscoveryOptions::default()).unwrap_err();
    assert!(matches!(
        error,
        DiscoveryError::UnsupportedVersion {
            protocol: 2,
            surface: 2
        }
    ));
    assert_eq!(error.code(), ErrorCode::UnsupportedVersion);
    assert_eq!(error.code().exit_code(), 3);
    fixture.write_json(&json!({"protocolVersion":1,"surfaceVersion":2,"whatever":true}));
    assert_eq!(fixture.check(), Err("descriptor_malformed".to_owned()));
    let mut extra = fixture.good();
    extra["extra"] = json!(1);
    fixture.write_json(&extra);
    assert_eq!(
        fixture.check(),
        Err("descriptor_malformed".to_owned()),
        "the shape is strict"
    );
}

#[test]
fn a_dead_pid_is_refused() {
    let fixture = Fixture::new();
    let mut descriptor = fixture.good();
    // Above any Linux pid_max (4 194 304), so no process can have it.
    descriptor["pid"] = json!(2_147_483_647u32);
    fixture.write_json(&descriptor);
    assert_eq!(fixture.check(), Err("process_dead".to_owned()));
    assert!(process_alive(std::process::id()));
    assert!(!process_alive(2_147_483_647));
}

#[test]
fn endpoint_paths_must_be_absolute_short_private_sockets() {
    let fixture = Fixture::new();
    let with_path = |path: &str| {
        let mut descriptor = fixture.good();
        descriptor["endpoint"] = json!({"kind":"unix","path":path});
        descriptor
    };
    // 100 bytes passes the length check (and then fails as missing); 101 bytes does not.
    let at_limit = format!("/{}", "s".repeat(99));
    fixture.write_json(&with_path(&at_limit));
    assert_eq!(fixture.check(), Err("endpoint_not_socket".to_owned()));
    fixture.write_json(&with_path(&format!("{at_limit}s")));
    assert_eq!(fixture.check(), Err("endpoint_invalid".to_owned()));
    fixture.write_json(&with_path("relative.sock"));
    assert_eq!(fixture.check(), Err("endpoint_invalid".to_owned()));
    let mut pipe = fixture.good();
    pipe["endpoint"] = json!({"kind":"pipe","name":"\\\\.\\pipe\\x"});
    fixture.write_json(&pipe);
    assert_eq!(fixture.check(), Err("endpoint_invalid".to_owned()));
    let mut tcp = fixture.good();
    tcp["endpoint"] = json!({"kind":"tcp","path":"127.0.0.1:1"});
    fixture.write_json(&tcp);
    assert_eq!(fixture.check(), Err("descriptor_malformed".to_owned()));

    let regular = fixture.dir.path().join("regular");
    std::fs::write(&regular, b"").unwrap();
    fixture.write_json(&with_path(regular.to_str().unwrap()));
    assert_eq!(fixture.check(), Err("endpoint_not_socket".to_owned()));

    std::fs::set_permissions(&fixture.socket, std::fs::Permissions::from_mode(0o660)).unwrap();
    fixture.write_json(&fixture.good());
    assert_eq!(fixture.check(), Err("endpoint_not_socket".to_owned()));
}

#[test]
fn messages_say_what_to_do_and_never_show_the_token() {
    let fixture = Fixture::new();
    let mut descriptor = fixture.good();
    descriptor["pid"] = json!(2_147_483_647u32);
    fixture.write_json(&descriptor);
    let error = discover_at(&fixture.path(), DiscoveryOptions::default()).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("start the host"), "{text}");
    assert!(!text.contains(&"A".repeat(43)));
    assert_eq!(error.code(), ErrorCode::Unavailable);
    let missing = discover(&fixture.dir.path().join("nowhere")).unwrap_err();
    assert!(missing.to_string().contains("awp-host serve"), "{missing}");
}

/// Gives `path` to uid 65534 when we may (root, as in the CI container); reports whether it did.
fn give_away(path: &Path) -> bool {
    let nobody = rustix::fs::Uid::from_raw(65_534);
    match rustix::fs::chown(path, Some(nobody), None) {
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

#[test]
fn a_descriptor_or_socket_owned_by_another_user_is_refused() {
    let fixture = Fixture::new();
    fixture.write_json(&fixture.good());
    if give_away(&fixture.path()) {
        assert_eq!(fixture.check(), Err("descriptor_owner".to_owned()));
        let error = discover_at(&fixture.path(), DiscoveryOptions::default()).unwrap_err();
        assert!(
            error.to_string().contains("run as the host's user"),
            "{error}"
        );
    }
    fixture.write_json(&fixture.good());
    if give_away(&fixture.socket) {
        assert_eq!(fixture.check(), Err("endpoint_not_socket".to_owned()));
    }
}
