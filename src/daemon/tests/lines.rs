//! Line framing: the codec's limits and CRLF, and what a too-long line
//! gets.

use super::*;

#[test]
fn line_codec_limits_and_crlf() {
    let mut codec = LineCodec::new(4);
    let mut buf = BytesMut::from(&b"ab\r\nabcd\nab"[..]);
    assert_eq!(codec.decode(&mut buf).unwrap().as_deref(), Some(&b"ab"[..]));
    assert_eq!(
        codec.decode(&mut buf).unwrap().as_deref(),
        Some(&b"abcd"[..])
    );
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert_eq!(
        codec.decode_eof(&mut buf).unwrap().as_deref(),
        Some(&b"ab"[..])
    );
    let mut buf = BytesMut::from(&b"abcde"[..]);
    assert!(matches!(codec.decode(&mut buf), Err(LineError::TooLong(4))));
}

#[test]
fn too_long_line_reply() {
    let line = request::too_long_line(1_048_576);
    assert_eq!(
        line,
        b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600,\"message\":\"Invalid Request\",\"data\":\"Line exceeds maximum of 1048576 bytes\"},\"id\":null}\n"
    );
}

#[tokio::test]
async fn oversized_line_gets_error_then_close() {
    let fx = start(false).await;
    let mut c = fx.client().await;
    let mut wr = c.wr;
    // The daemon may close before the whole line is written; that is the point.
    let writer = tokio::spawn(async move {
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..=super::conn::MAX_LINE >> 20 {
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
        wr
    });
    let reply = c.lines.next_line().await.unwrap().unwrap();
    assert!(
        reply.contains("\"data\":\"Line exceeds maximum of 16777216 bytes\""),
        "{reply}"
    );
    assert_eq!(
        tokio::time::timeout(WAIT, c.lines.next_line())
            .await
            .unwrap()
            .unwrap(),
        None
    );
    drop(writer.await.unwrap());
}
