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
