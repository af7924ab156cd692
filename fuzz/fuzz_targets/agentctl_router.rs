//! Fuzz target `agentctl_router`: the agentctl router fed arbitrary interleavings of `/acp/call`s, `/acp/send`
//! bodies, agent lines (structured and arbitrary bytes), subscriber changes, timeouts and exits, checked against
//! the model of `crates/agentctl/tests/common/router_model.rs` (every call ends exactly once, call ids never
//! collide, agent requests are answered at most once, counts and limits hold). The same model runs as a proptest
//! in `crates/agentctl/tests/router_state_machine.rs`, so `cargo test` covers it on stable.
#![no_main]

#[path = "../../crates/agentctl/tests/common/router_model.rs"]
mod router_model;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    router_model::check_fuzz_input(data);
});
