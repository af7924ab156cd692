//! The smoke switch shared by the custom (`harness = false`, non-criterion) benches.
//!
//! `cargo bench` passes `--bench` to every bench binary; `cargo test --bench '*'` (what `cargo xtask ci` runs)
//! does not. Criterion then runs each benchmark once (its test mode); the custom benches do the same by asking
//! [`smoke_mode`]: a few iterations, every correctness check kept (the baseline and ours still have to agree), and
//! no result fragment written, so a smoke run can never replace measured numbers in `docs/benchmarks.md`.

/// True when the running bench binary was started without `--bench` (a smoke run under `cargo test`).
pub fn smoke_mode() -> bool {
    !std::env::args().skip(1).any(|arg| arg == "--bench")
}

/// Where a custom bench writes its result fragment: `$AGENTWIRE_BENCH_OUT`, else the workspace's
/// `target/bench-results` (the directory `cargo xtask bench` collects into `docs/benchmarks.md`).
pub fn results_dir() -> std::path::PathBuf {
    std::env::var_os("AGENTWIRE_BENCH_OUT").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-results"),
        std::path::PathBuf::from,
    )
}

/// Writes a bench's result fragment `file_name` into [`results_dir`] (created if missing); returns its path.
///
/// # Errors
/// Creating the directory or writing the file failed.
pub fn write_result(file_name: &str, text: &str) -> std::io::Result<std::path::PathBuf> {
    let dir = results_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(file_name);
    std::fs::write(&path, text)?;
    Ok(path)
}
