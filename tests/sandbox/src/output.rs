//! The sandbox's own output, which must never stop it: a terminal that closed (EIO) or a pipe
//! whose reader is gone (EPIPE, e.g. `make demo | tee demo.log` after Ctrl-C) makes writes fail,
//! and `println!` would panic and leave every started process running. Writes here ignore
//! errors; a failed write to stdout is remembered so the demo can stop once nobody sees it.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_BROKEN: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout and flushes; on failure remembers that stdout is gone.
pub fn stdout_text(text: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        STDOUT_BROKEN.store(true, Ordering::Relaxed);
    }
}

/// Remembers that stdout is gone when, without writing to it, it shows an error or a hang-up
/// (a pipe whose reader exited, a terminal that closed); a file never does.
pub fn check_stdout() {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::OUT)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if poll(&mut fds, Some(&zero)).is_ok()
        && fds[0]
            .revents()
            .intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL)
    {
        STDOUT_BROKEN.store(true, Ordering::Relaxed);
    }
}

/// Writes one line to stdout (see [`stdout_text`]).
pub fn stdout_line(args: fmt::Arguments<'_>) {
    stdout_text(&format!("{args}\n"));
}

/// Writes one line to stderr, ignoring failures.
pub fn stderr_line(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{args}").and_then(|()| err.flush());
}

/// Whether a write to stdout has failed (its reader or terminal is gone).
pub fn stdout_broken() -> bool {
    STDOUT_BROKEN.load(Ordering::Relaxed)
}

/// `println!` that never panics: see [`stdout_line`].
macro_rules! say {
    ($($arg:tt)*) => { $crate::output::stdout_line(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics: see [`stderr_line`].
macro_rules! note {
    ($($arg:tt)*) => { $crate::output::stderr_line(format_args!($($arg)*)) };
}
