//! An upstream process's stderr, into switchyard's log: one `info` line
//! per stderr line, tagged with the upstream's name and the pid, at most
//! [`LINES_PER_SECOND`] a second (bursts of [`BURST`]); the lines over
//! the rate are dropped and the next line logged says how many. A line
//! longer than [`MAX_LINE`] bytes is cut there (the rest is skipped), so
//! reading stderr holds at most that much memory.

use std::num::NonZeroU32;

use governor::{Quota, RateLimiter};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::ChildStderr;

/// Longest stderr line logged, in bytes; the rest of a longer line is
/// skipped.
pub(super) const MAX_LINE: usize = 4096;
/// Sustained stderr lines logged per second and process.
pub(super) const LINES_PER_SECOND: NonZeroU32 = NonZeroU32::new(20).expect("20 > 0; qed");
/// Lines logged at once after a quiet spell.
pub(super) const BURST: NonZeroU32 = NonZeroU32::new(100).expect("100 > 0; qed");

/// Logs `stderr` line by line until it closes (the process exited).
pub(super) async fn log(stderr: ChildStderr, upstream: String, pid: u32) {
    let limiter = RateLimiter::direct(Quota::per_second(LINES_PER_SECOND).allow_burst(BURST));
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::with_capacity(256);
    let mut dropped: u64 = 0;
    loop {
        line.clear();
        let limit = MAX_LINE as u64;
        let n = match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let cut = n == MAX_LINE && line.last() != Some(&b'\n');
        if limiter.check().is_err() {
            dropped += 1;
        } else {
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            tracing::info!(upstream = %upstream, pid, dropped, cut, line = %text, "upstream stderr");
            dropped = 0;
        }
        if cut && !skip_rest(&mut reader).await {
            break;
        }
    }
    if dropped > 0 {
        tracing::info!(upstream = %upstream, pid, dropped, "upstream stderr closed; lines dropped");
    }
}

/// Skips to the end of an over-long line; false at the end of stderr.
async fn skip_rest(reader: &mut BufReader<ChildStderr>) -> bool {
    loop {
        let (done, used) = match reader.fill_buf().await {
            Ok([]) | Err(_) => return false,
            Ok(buf) => match memchr::memchr(b'\n', buf) {
                Some(i) => (true, i + 1),
                None => (false, buf.len()),
            },
        };
        reader.consume(used);
        if done {
            return true;
        }
    }
}
