//! Workspace automation.

fn main() {}
