//! Frames that break §4: header errors are fatal, payload errors continue
//! with the frame id.

use super::*;

/// Header errors: fatal, in the reference order, with the reference text.
#[test]
fn header_errors_are_fatal() {
    let a = id(0x00);
    let cases = [
        (
            "",
            FrameError::TooShort { kind: None },
            "Invalid frame: too short",
        ),
        (
            "0100000102030405060708090a0b0c0d0e",
            FrameError::TooShort { kind: Some(1) },
            "Invalid frame: too short",
        ),
        (
            "0002000102030405060708090a0b0c0d0e0f01",
            FrameError::ReservedFlags { id: a, kind: 0 },
            "Invalid frame: reserved flag bits must be zero",
        ),
        (
            "0001000102030405060708090a0b0c0d0e0f01",
            FrameError::IncompleteTimestamp { id: a, kind: 0 },
            "Invalid frame: incomplete timestamp",
        ),
        (
            "0400000102030405060708090a0b0c0d0e0f",
            FrameError::UnknownKind { id: a, kind: 4 },
            "Unknown frame kind",
        ),
        // Order: reserved flags before timestamp before kind.
        (
            "ff83000102030405060708090a0b0c0d0e0f",
            FrameError::ReservedFlags { id: a, kind: 0xff },
            "Invalid frame: reserved flag bits must be zero",
        ),
        (
            "ff01000102030405060708090a0b0c0d0e0f",
            FrameError::IncompleteTimestamp { id: a, kind: 0xff },
            "Invalid frame: incomplete timestamp",
        ),
    ];
    for (hex, expected, text) in cases {
        let e = err(hex);
        assert_eq!(e, expected, "{hex}");
        assert_eq!(e.to_string(), text);
        assert!(!e.can_continue(), "{hex} must be fatal");
        assert_eq!(e.code(), 1002);
    }
    assert_eq!(err("").frame_id(), None);
    assert_eq!(
        err("0400000102030405060708090a0b0c0d0e0f").frame_id(),
        Some(a)
    );
}

/// Payload errors: non-fatal, carrying the offending frame's id.
#[test]
fn payload_errors_continue_with_the_frame_id() {
    let a = id(0x00);
    let cases: Vec<(String, FrameError, &str)> = vec![
        (
            with_a("0000", ""),
            FrameError::NoControlOp { id: a },
            "Invalid control frame: no operation",
        ),
        (
            with_a("0000", "04"),
            FrameError::UnknownControlOp { id: a, op: 4 },
            "Unknown control op",
        ),
        (
            with_a("0000", "00"),
            FrameError::HandshakeWithoutData { id: a },
            "Invalid handshake frame: data is required",
        ),
        (
            with_a("0000", "0100"),
            FrameError::PingPongWithPayload { id: a },
            "Invalid ping/pong frame: must not have payload",
        ),
        (
            with_a("0000", "02ff"),
            FrameError::PingPongWithPayload { id: a },
            "Invalid ping/pong frame: must not have payload",
        ),
        (
            with_a("0000", "03ff"),
            FrameError::CloseReasonNotUtf8 { id: a },
            "Invalid control frame: close reason is not valid UTF-8",
        ),
        (
            with_a("0100", "030000"),
            FrameError::NoSubject { id: a },
            "Invalid message frame: no subject",
        ),
        (
            with_a("0100", "04000000727063"),
            FrameError::IncompleteSubject { id: a },
            "Invalid message frame: incomplete subject",
        ),
        (
            with_a("0100", "ffffffff727063"),
            FrameError::IncompleteSubject { id: a },
            "Invalid message frame: incomplete subject",
        ),
        (
            with_a("0200", "000102030405060708090a0b0c0d0e"),
            FrameError::AckWithoutId { id: a },
            "Invalid ack frame: no frame ID",
        ),
        (
            with_a("0200", "000102030405060708090a0b0c0d0e0f10"),
            FrameError::AckTrailingData { id: a },
            "Invalid ack frame: unexpected trailing data",
        ),
        (
            with_a("0300", "ea03190000"),
            FrameError::ErrorWithoutCode { id: a },
            "Invalid error frame: no code or message",
        ),
        (
            with_a("0300", "ea"),
            FrameError::ErrorWithoutCode { id: a },
            "Invalid error frame: no code or message",
        ),
        (
            with_a("0300", "ea031900000049"),
            FrameError::ErrorIncompleteMessage { id: a },
            "Invalid error frame: incomplete message",
        ),
        (
            with_a("0300", "ea0301000000ff"),
            FrameError::ErrorMessageNotUtf8 { id: a },
            "Invalid error frame: message is not valid UTF-8",
        ),
    ];
    for (hex, expected, text) in cases {
        let e = err(&hex);
        assert_eq!(e, expected, "{hex}");
        assert_eq!(e.to_string(), text);
        assert!(e.can_continue(), "{hex} must not be fatal");
        assert_eq!(e.frame_id(), Some(a));
        assert_eq!(e.code(), 1002);
    }
}
