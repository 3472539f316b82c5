//! Every integration test of this crate, in one test binary.
//!
//! Each `tests/*.rs` file is a module here (`cargo test --test integration --
//! <file>::` runs one file's tests), and the support modules (`common`,
//! `*_support`) are declared once for all of them. One binary per crate, not
//! one per file: each test binary links the whole server, and ~120 of them
//! needed tens of GB of disk and minutes of linking. `autotests = false` would
//! skip a new file silently: `every_test_file_is_a_module` (in `crates/rkube`)
//! fails when a file (or a directory with a `main.rs`) in any crate's `tests/`
//! has no line here.


#[path = "controller.rs"]
mod controller;
#[path = "env.rs"]
mod env;
