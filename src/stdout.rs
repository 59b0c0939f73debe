//! Writing the CLI's output to stdout without panicking.
//!
//! `println!` panics when stdout is closed (`switchyard check … | head`:
//! Rust ignores SIGPIPE, so the write fails with EPIPE). Every command
//! writes through [`line()`] instead and treats [`is_closed`] as a clean end:
//! nobody is left to read the rest.

use std::io::{self, Write};

/// Writes `text` and a newline to stdout and flushes it.
///
/// # Errors
///
/// The write error; [`is_closed`] tells a reader that went away.
pub fn line(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

/// True when the write failed because nobody reads stdout any more.
pub fn is_closed(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::BrokenPipe
}
