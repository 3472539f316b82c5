//! Progress on stderr: an indicatif bar per phase (drawn only when stderr is
//! a terminal) and one plain line per phase, so logs of non-interactive runs
//! (CI, tests) still show where a run is.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps labelled `msg` (a spinner when `len` is 0).
pub fn bar(len: u64, msg: impl Into<String>) -> ProgressBar {
    let msg = msg.into();
    phase(&msg);
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = if len == 0 {
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
    } else {
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {human_pos}/{human_len} {elapsed} (eta {eta})")
    };
    if let Ok(style) = style {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg);
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Prints one line about the current phase on stderr.
pub fn phase(msg: &str) {
    eprintln!("rkube bench: {msg}");
}
