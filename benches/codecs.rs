//! Placeholder replaced by the benchmark author.
fn main() {}
