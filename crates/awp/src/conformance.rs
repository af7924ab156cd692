//! AWP conformance checks (see the conformance helper).
