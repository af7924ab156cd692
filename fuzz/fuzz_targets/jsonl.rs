//! Fuzz target `jsonl`: the JSON Lines decoder never panics, any split of the input gives the same frames
//! as a reference model, every `Frame::Json` parses, and the buffer stays within `max_line_bytes + 1`.
//!
//! Input layout: byte 0 picks `max_line_bytes` (mostly 0..40, sometimes the 4 MiB default), byte 1
//! `max_preview_bytes`, byte 2 a chunk size; the rest is the stream. The same body runs as a proptest in
//! `crates/jsonl/tests/properties.rs` (`fuzz_body_holds_*`), so `cargo test` covers it on stable.
#![no_main]

#[path = "../../crates/jsonl/tests/common/invariants.rs"]
mod invariants;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    invariants::check_fuzz_input(data);
});
