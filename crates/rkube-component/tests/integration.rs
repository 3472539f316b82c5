//! rkube-component's integration tests (one binary; each file a module).

#[path = "retry_after.rs"]
mod retry_after;
