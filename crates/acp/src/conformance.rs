//! Conformance checks of an ACP agent (filled in below).
