//! A real store meeting a write error (a full disk, through the
//! [`WriteFaults`] seam of its file): commits fail, the store says so,
//! refuses writes at once without a warning per write, and is reopened
//! once writes succeed again.
#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::envelope::Payload;
use crate::persist::Retention;

/// What the writer thread logged, as text.
#[derive(Debug, Clone, Default)]
struct Lines(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
    fn warnings(&self) -> usize {
        self.text().lines().filter(|l| l.contains("WARN")).count()
    }
}

fn append(log: &mut EmbeddedLog, text: &str) -> Result<u64, PersistError> {
    let data = Payload::json(text).unwrap();
    let at = SystemTime::now();
    log.append("t", &data, at, &Retention::default())
        .map(|(stored, _)| stored.seq)
}

#[test]
fn a_failed_commit_reopens_the_store_once_writes_succeed_and_warns_rate_limited() {
    let dir = tempfile::tempdir().unwrap();
    let faults = WriteFaults::register(dir.path());
    let lines = Lines::default();
    let logs = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || logs.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let mut log = EmbeddedLog::open(dir.path()).unwrap();
        assert_eq!(append(&mut log, "1"), Ok(1));
        assert_eq!(log.health().failure(), None);

        faults.set(true);
        let err = append(&mut log, "2").unwrap_err().to_string();
        assert!(err.contains("No space left on device"), "{err}");
        let why = log
            .health()
            .failure()
            .expect("the store reports the failure");
        assert!(why.contains("No space left on device"), "{why}");
        // Every later write fails at once, without a line each.
        for i in 0..200 {
            assert!(append(&mut log, &i.to_string()).is_err());
        }
        let warned = lines.warnings();
        assert!(
            (1..=3).contains(&warned),
            "{warned} warnings for 201 failed writes:\n{}",
            lines.text()
        );

        faults.set(false);
        // Reopened after a backoff: writes succeed again, and nothing
        // failed took a sequence.
        let deadline = Instant::now() + Duration::from_secs(60);
        let seq = loop {
            match append(&mut log, "3") {
                Ok(seq) => break seq,
                Err(e) if Instant::now() > deadline => panic!("never reopened: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        assert_eq!(seq, 2);
        assert_eq!(log.health().failure(), None);
        let read: Vec<u64> = log
            .read("t", 0, 10)
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(read, [1, 2]);
        assert!(lines.text().contains("reopened"), "{}", lines.text());
    });
}
