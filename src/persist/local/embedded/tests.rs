#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime};

use super::*;
use crate::envelope::Payload;
use crate::persist::Retention;

fn json(text: &str) -> Payload {
    Payload::json(text).unwrap()
}

fn none() -> Retention {
    Retention::default()
}

fn seqs(log: &EmbeddedLog, topic: &str) -> Vec<u64> {
    log.read(topic, 0, usize::MAX)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect()
}

#[test]
fn reopen_keeps_messages_last_seq_and_positions() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_000_000_123);
    let cbor = Payload::Cbor(vec![0xa1, 0x61, 0x61, 0x01].into());
    {
        let mut log = EmbeddedLog::open(&data).unwrap();
        let (first, evicted) = log
            .append("orders", &json(r#"{"n":1}"#), at, &none())
            .unwrap();
        assert_eq!((first.seq, evicted), (1, vec![]));
        let (second, _) = log.append("orders", &cbor, at, &none()).unwrap();
        assert_eq!(second.seq, 2);
        log.append("other", &json("[]"), at, &none()).unwrap();
        let position = Position {
            topic: "orders".into(),
            start: 0,
            floor: 0,
            acked: BTreeSet::from([2]),
        };
        log.set_position("sub-1", &position).unwrap();
    }
    let mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the data directory is private");

    let log = EmbeddedLog::open(&data).unwrap();
    let read = log.read("orders", 0, 10).unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(read[0].data, json(r#"{"n":1}"#));
    assert_eq!(read[0].stored_at, at, "stored_at kept to the millisecond");
    assert_eq!(read[1].data, cbor);
    assert_eq!(log.last_seq("orders").unwrap(), 2);
    assert_eq!(log.last_seq("never").unwrap(), 0);
    let position = log.position("sub-1").unwrap().unwrap();
    assert_eq!(position.topic, "orders");
    assert_eq!(position.acked, BTreeSet::from([2]));
    assert_eq!(log.position("sub-2").unwrap(), None);
    let mut topics = log.topics().unwrap();
    topics.sort();
    assert_eq!(topics, ["orders", "other"]);
}

/// The file holds the messages: 0600 even in a directory the operator
/// made with a wider mode (here 0755), whatever the umask lets through.
#[test]
fn the_store_file_is_created_private_in_a_directory_made_by_others() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("shared");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    drop(EmbeddedLog::open(&data).unwrap());
    let mode = std::fs::metadata(data.join(FILE_NAME))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the store file is private");
    let dir_mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(
        dir_mode & 0o777,
        0o755,
        "a directory made by others is left as it is"
    );
}

#[test]
fn read_after_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = EmbeddedLog::open(dir.path()).unwrap();
    let now = SystemTime::now();
    for n in 1..=5 {
        log.append("t", &json(&n.to_string()), now, &none())
            .unwrap();
    }
    let got: Vec<u64> = log.read("t", 2, 2).unwrap().iter().map(|m| m.seq).collect();
    assert_eq!(got, [3, 4]);
    assert!(log.read("t", 5, 10).unwrap().is_empty());
    assert!(log.read("t", u64::MAX, 10).unwrap().is_empty());
    assert!(log.read("t", 0, 0).unwrap().is_empty());
    // A topic that is a prefix of another does not see its messages.
    log.append("t.x", &json("0"), now, &none()).unwrap();
    assert_eq!(seqs(&log, "t"), [1, 2, 3, 4, 5]);
}

#[test]
fn count_and_bytes_retention_evict_the_oldest_and_last_seq_survives() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    {
        let mut log = EmbeddedLog::open(dir.path()).unwrap();
        let count = Retention {
            max_count: Some(3),
            ..none()
        };
        for n in 1..=3 {
            let (_, evicted) = log.append("c", &json(&n.to_string()), now, &count).unwrap();
            assert!(evicted.is_empty());
        }
        let (stored, evicted) = log.append("c", &json("4"), now, &count).unwrap();
        assert_eq!((stored.seq, evicted), (4, vec![1]));
        assert_eq!(seqs(&log, "c"), [2, 3, 4]);

        // Ten bytes: "1000" is four, so two fit and a third evicts one.
        let bytes = Retention {
            max_bytes: Some(10),
            ..none()
        };
        log.append("b", &json("1000"), now, &bytes).unwrap();
        log.append("b", &json("2000"), now, &bytes).unwrap();
        let (_, evicted) = log.append("b", &json("3000"), now, &bytes).unwrap();
        assert_eq!(evicted, [1]);
        // A message larger than the limit alone takes its sequence and
        // goes at once, with the rest (as the memory log does).
        let (big, evicted) = log.append("b", &json("123456789012"), now, &bytes).unwrap();
        assert_eq!((big.seq, evicted), (4, vec![2, 3, 4]));
        assert!(seqs(&log, "b").is_empty());
        let (_, evicted) = log.append("b", &json("5"), now, &bytes).unwrap();
        assert!(evicted.is_empty());
        let usage = Usage {
            messages: 4,
            bytes: 4,
        };
        assert_eq!(log.stats().unwrap(), usage);
    }
    let mut log = EmbeddedLog::open(dir.path()).unwrap();
    let usage = Usage {
        messages: 4,
        bytes: 4,
    };
    assert_eq!(log.stats().unwrap(), usage, "totals summed again on open");
    assert_eq!(seqs(&log, "c"), [2, 3, 4]);
    assert_eq!(log.last_seq("b").unwrap(), 5);
    let (next, _) = log.append("c", &json("5"), now, &none()).unwrap();
    assert_eq!(next.seq, 5, "sequences continue after a restart");
}

#[test]
fn expire_evicts_by_age_and_keeps_last_seq() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let age = Retention {
        max_age: Some(Duration::from_secs(60)),
        ..none()
    };
    let mut log = EmbeddedLog::open(dir.path()).unwrap();
    log.append("a", &json("1"), t0, &age).unwrap();
    log.append("a", &json("2"), t0 + Duration::from_secs(30), &age)
        .unwrap();
    // No max_age: nothing to do.
    let far = t0 + Duration::from_secs(1_000);
    assert!(log.expire("a", far, &none()).unwrap().is_empty());
    // 59.999 s old is kept; exactly 60 s old goes.
    let at_60 = t0 + Duration::from_secs(60);
    let before = at_60 - Duration::from_millis(1);
    assert!(log.expire("a", before, &age).unwrap().is_empty());
    assert_eq!(log.expire("a", at_60, &age).unwrap(), [1]);
    assert_eq!(log.expire("a", far, &age).unwrap(), [2]);
    assert!(log.expire("a", far, &age).unwrap().is_empty());
    assert!(log.expire("unknown", far, &age).unwrap().is_empty());
    assert!(log.topics().unwrap().is_empty(), "no stored messages left");
    assert_eq!(log.stats().unwrap(), Usage::default());
    drop(log);
    let log = EmbeddedLog::open(dir.path()).unwrap();
    assert_eq!(log.last_seq("a").unwrap(), 2);
    assert!(seqs(&log, "a").is_empty());
}

#[test]
fn positions_are_replaced_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = EmbeddedLog::open(dir.path()).unwrap();
    let mut position = Position {
        topic: "t".into(),
        start: 2,
        floor: 3,
        acked: BTreeSet::from([5, 7]),
    };
    log.set_position("s", &position).unwrap();
    position.floor = 5;
    position.acked = BTreeSet::from([7]);
    log.set_position("s", &position).unwrap();
    assert_eq!(log.position("s").unwrap(), Some(position.clone()));
    log.set_position("r", &Position::default()).unwrap();
    let mut all = log.positions().unwrap();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        all,
        [("r".into(), Position::default()), ("s".into(), position)]
    );
    assert!(log.remove_position("s").unwrap());
    assert!(!log.remove_position("s").unwrap());
    drop(log);
    let log = EmbeddedLog::open(dir.path()).unwrap();
    assert_eq!(log.position("s").unwrap(), None);
}

#[test]
fn a_second_open_of_the_same_directory_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedLog::open(dir.path()).unwrap();
    let err = EmbeddedLog::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("open in another process"), "{err}");
    assert!(err.contains(FILE_NAME), "names the file: {err}");
}

#[test]
fn a_file_that_is_not_a_store_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE_NAME), vec![0x5a; 8192]).unwrap();
    let err = EmbeddedLog::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains(FILE_NAME), "{err}");
}

#[test]
fn a_damaged_store_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = EmbeddedLog::open(dir.path()).unwrap();
        for n in 0..200 {
            let data = json(&format!("\"{}\"", "x".repeat(n)));
            log.append("t", &data, SystemTime::now(), &none()).unwrap();
        }
    }
    // Overwrite everything past the header: the commit slots stay, the
    // pages they point to are garbage.
    let path = dir.path().join(FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    for byte in bytes.iter_mut().skip(4096) {
        *byte ^= 0xff;
    }
    std::fs::write(&path, bytes).unwrap();
    let err = EmbeddedLog::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("damaged"), "{err}");
}

#[test]
fn a_directory_that_cannot_be_created_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let err = EmbeddedLog::open(&file.join("store"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot create the data directory"), "{err}");
}

#[test]
fn conforms() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    crate::persist::local::conformance::run(|| {
        n += 1;
        EmbeddedLog::open(&dir.path().join(n.to_string())).unwrap()
    });
}

#[test]
fn close_releases_the_file_and_later_calls_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = EmbeddedLog::open(dir.path()).unwrap();
    log.append("t", &json("1"), SystemTime::now(), &none())
        .unwrap();
    log.close();
    let err = log
        .append("t", &json("2"), SystemTime::now(), &none())
        .unwrap_err();
    assert!(matches!(err, PersistError::Store(_)), "{err:?}");
    assert!(log.read("t", 0, 10).is_err());
    // Released while `log` still exists: another open succeeds at once.
    let again = EmbeddedLog::open(dir.path()).unwrap();
    assert_eq!(again.last_seq("t").unwrap(), 1);
}
