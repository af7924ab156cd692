//! Test helpers shared by the workspace's integration tests; not published.
//!
//! Fixture agents and the binaries under `bins/` are ordinary workspace binaries. `cargo test --workspace`
//! (the README's test command) builds every binary before any test runs, so tests find them next to the
//! test executable's `deps/` directory. When a single package is tested with `-p`, build them first with
//! `cargo build --workspace --bins`.
//!
//! Modules: [`proc`] (portable process liveness for group-kill asserts), [`bench`] (the custom benches' smoke
//! switch), [`jsonrpc_peer`], [`acp_python`], [`openai_server`] (a loopback OpenAI-compatible server) and
//! [`text_image`] (images and PDFs with text for OCR tests). Only ever a dev-dependency.

use std::path::PathBuf;

pub mod acp_python;
pub mod bench;
pub mod jsonrpc_peer;
pub mod openai_server;
pub mod proc;
pub mod text_image;

/// Path of a workspace binary named `name` in the target directory the running test was built into.
///
/// # Panics
/// Panics with the command to run when the binary has not been built.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test>-<hash>  ->  target/<profile>/<name>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    let path = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "binary `{name}` not found at {}; run `cargo build --workspace --bins` (or `cargo test --workspace`)",
        path.display()
    );
    path
}
