//! Subjects: N11–N16 and L1 invalid subjects, legacy subjects when
//! accepted.

use super::*;

fn subject_error(subject_hex: &str, rules: SubjectRules) -> FrameError {
    let len = subject_hex.len() / 2;
    let hex = with_a(
        "0100",
        &format!("{}{subject_hex}", tohex(&(len as u32).to_le_bytes())),
    );
    match decode_with(&unhex(&hex), rules) {
        Err(e) => e,
        Ok(frame) => panic!("{subject_hex} decoded as {frame:?}"),
    }
}

#[test]
fn n11_to_n16_and_l1_invalid_subjects() {
    let n11 = unhex("0100000102030405060708090a0b0c0d0e0f080000007270632f6563686f");
    let e = decode(&n11).expect_err("legacy subject refused by default");
    assert_eq!(
        e,
        FrameError::InvalidSubject {
            id: id(0x00),
            reason: SubjectError::Legacy
        }
    );
    assert_eq!(e.to_string(), "Invalid subject namespace");
    assert!(e.can_continue());
    assert_eq!(e.frame_id(), Some(id(0x00)));
    let legacy = decode_with(&n11, SubjectRules::AcceptLegacy).expect("legacy accepted");
    assert_eq!(
        legacy.body,
        Body::Message {
            subject: Subject::LegacyRpc("echo".to_owned()),
            data: vec![].into()
        }
    );

    let x = |n: usize| tohex(&vec![b'x'; n]);
    let cases = [
        (tohex(b"app"), SubjectError::UnknownNamespace),
        (tohex(b"RPC"), SubjectError::UnknownNamespace),
        (String::new(), SubjectError::Empty),
        (
            format!("{}{}", tohex(b"app/"), x(253)),
            SubjectError::TooLong(257),
        ),
        (format!("{}fffe", tohex(b"app/")), SubjectError::NotUtf8),
        (format!("{}00", tohex(b"app/")), SubjectError::ContainsNul),
        (tohex(b"rpc "), SubjectError::UnknownNamespace),
    ];
    for (subject, reason) in cases {
        for rules in [SubjectRules::Current, SubjectRules::AcceptLegacy] {
            let e = subject_error(&subject, rules);
            assert_eq!(
                e,
                FrameError::InvalidSubject {
                    id: id(0x00),
                    reason
                },
                "{subject}"
            );
            assert!(e.can_continue());
        }
    }
    // The 256-byte version of N16 is valid.
    let ok = format!("{}{}", tohex(b"app/"), x(252));
    let hex = with_a("0100", &format!("00010000{ok}"));
    assert!(matches!(
        decode(&unhex(&hex)),
        Ok(Frame {
            body: Body::Message {
                subject: Subject::App(_),
                ..
            },
            ..
        })
    ));
}

#[test]
fn legacy_subjects_classify_when_accepted() {
    let parse = |s: &str| Subject::parse(s.as_bytes(), SubjectRules::AcceptLegacy);
    assert_eq!(
        parse("event/user.joined"),
        Ok(Subject::LegacyEvent("user.joined".to_owned()))
    );
    assert_eq!(
        parse("stream/abc/chunk"),
        Ok(Subject::LegacyStream("abc/chunk".to_owned()))
    );
    assert_eq!(parse("rpc/"), Ok(Subject::LegacyRpc(String::new())));
    assert_eq!(parse("app/rpc/x"), Ok(Subject::App("rpc/x".to_owned())));
    assert!(parse("rpc/x").is_ok_and(|s| s.is_legacy() && s.channel() == Channel::Rpc));
    assert_eq!(
        Subject::legacy_event(&"y".repeat(251)),
        Err(SubjectError::TooLong(257))
    );
    assert_eq!(
        Subject::legacy_event(&"y".repeat(250)).map(|s| s.wire_len()),
        Ok(256)
    );
    assert_eq!(Subject::app("a\0b"), Err(SubjectError::ContainsNul));
    assert_eq!(
        Subject::legacy_rpc("echo").map(|s| s.to_string()),
        Ok("rpc/echo".to_owned())
    );
}
