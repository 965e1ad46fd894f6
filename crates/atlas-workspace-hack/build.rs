//! Empty: a build script makes cargo unify this crate's build-dependencies too.
fn main() {}
