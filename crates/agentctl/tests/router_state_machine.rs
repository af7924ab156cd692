//! Proptest state machine for the sans-IO router: random interleavings of `/acp/call`s, `/acp/send`s, agent
//! requests and responses, subscriber changes, timeouts, pipe failures and agent exits, checked against the model
//! in `common/router_model.rs` (every call ends exactly once, call ids never collide, every agent request is
//! answered at most once, counts and limits hold). The cargo-fuzz target `agentctl_router` runs the same model.

mod common {
    pub mod router_model;
}

use common::router_model::{Op, check_fuzz_input, run};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(|method| Op::Call { method }),
        1 => any::<u8>().prop_map(|n| Op::Abandon { n }),
        1 => any::<u8>().prop_map(|n| Op::FailCall { n }),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(id, error)| Op::AgentResponse { id, error }),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(method, session)| Op::AgentRequest { method, session }),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(n, error)| Op::ClientAnswer { n, error }),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(kind, session)| Op::ClientSend { kind, session }),
        1 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Op::AgentLine),
        1 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Op::ClientBody),
        2 => (0u8..3).prop_map(Op::Subscribers),
        1 => (0u8..15).prop_map(|secs| Op::Advance { secs }),
        1 => any::<bool>().prop_map(|stdout| Op::FailAll { stdout }),
        1 => Just(Op::AgentExited),
        1 => Just(Op::AgentStarted),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_call_ends_exactly_once_and_ids_never_collide(
        auto_approve in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        run(auto_approve, &ops);
    }

    #[test]
    fn fuzz_body_holds_for_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_fuzz_input(&data);
    }
}
