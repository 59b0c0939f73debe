#![allow(clippy::unwrap_used)]

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::{AnyDelimiterCodecError, FramedRead};

use super::{Lines, INITIAL};

/// The default `max_message_bytes`.
const MAX: usize = 1 << 20;

/// A reader that hands out at most `chunk` bytes per read, like a socket.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    chunk: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = buf
            .remaining()
            .min(self.chunk)
            .min(self.data.len() - self.at);
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

fn framed(data: Vec<u8>, max: usize) -> FramedRead<Chunked, Lines> {
    let reader = Chunked {
        data,
        at: 0,
        chunk: 16 * 1024,
    };
    FramedRead::new(reader, Lines::new(max))
}

#[tokio::test]
async fn lines_are_framed_as_before() {
    let max = 10;
    let mut input = b"a\r\n\nbc\n".to_vec();
    input.extend_from_slice(&[b'x'; 10]);
    input.extend_from_slice(b"\nlast");
    let mut lines = framed(input, max);
    let mut got = Vec::new();
    while let Some(line) = lines.next().await {
        got.push(line.unwrap());
    }
    // `\r` and empty lines are the caller's; a line of exactly `max` bytes
    // is fine; a final line without `\n` comes at EOF.
    let want: Vec<&[u8]> = vec![b"a\r", b"", b"bc", &[b'x'; 10], b"last"];
    assert_eq!(got, want);
}

#[tokio::test]
async fn a_line_over_max_is_refused() {
    let mut input = vec![b'x'; 11];
    input.push(b'\n');
    let mut lines = framed(input, 10);
    assert!(matches!(
        lines.next().await,
        Some(Err(AnyDelimiterCodecError::MaxChunkLengthExceeded))
    ));
}

#[tokio::test]
async fn a_long_line_leaves_no_large_buffer_behind() {
    // 600 KiB: FramedRead alone doubles to 1 MiB for it and keeps the
    // 424 KiB left over (and reuses the whole MiB once the line is gone).
    let mut input = vec![b'x'; 600 * 1024];
    input.extend_from_slice(b"\nsmall\n");
    let mut lines = framed(input, MAX);
    let long = lines.next().await.unwrap().unwrap();
    assert_eq!(long.len(), 600 * 1024);
    let after_long = lines.read_buffer().capacity();
    drop(long);
    assert_eq!(&lines.next().await.unwrap().unwrap()[..], b"small");
    let after_small = lines.read_buffer().capacity();
    assert!(
        after_long <= INITIAL && after_small <= INITIAL,
        "read buffer capacity after a 600 KiB line: {after_long}, after the next: {after_small} \
         (want <= {INITIAL})"
    );
}

#[tokio::test]
async fn an_over_long_line_never_grows_the_buffer_past_max() {
    // The soak's oversize line: 1 MiB + 64 KiB against the 1 MiB limit.
    // FramedRead alone doubles to 2 MiB before it can tell.
    let mut input = vec![b'x'; MAX + 64 * 1024];
    input.push(b'\n');
    let mut lines = framed(input, MAX);
    assert!(matches!(
        lines.next().await,
        Some(Err(AnyDelimiterCodecError::MaxChunkLengthExceeded))
    ));
    let capacity = lines.read_buffer().capacity();
    assert!(
        capacity <= MAX + 1 + INITIAL,
        "read buffer grew to {capacity} for a {MAX}-byte limit"
    );
}

#[tokio::test]
async fn many_small_lines_keep_a_small_buffer() {
    let input: Vec<u8> = (0..10_000)
        .flat_map(|i| format!("{{\"id\":{i}}}\n").into_bytes())
        .collect();
    let mut lines = framed(input, MAX);
    let mut n = 0;
    let mut most = 0;
    while let Some(line) = lines.next().await {
        line.unwrap();
        n += 1;
        most = most.max(lines.read_buffer().capacity());
    }
    assert_eq!(n, 10_000);
    assert!(most <= 2 * INITIAL, "read buffer reached {most}");
}

/// Decodes `input` handed over in `chunks`-sized pieces, then EOF, with
/// `codec`: every line or error in order.
fn decode_all<D>(mut codec: D, input: &[u8], chunk: usize) -> Vec<Result<Vec<u8>, String>>
where
    D: tokio_util::codec::Decoder<Item = bytes::Bytes, Error = AnyDelimiterCodecError>,
{
    let mut buf = bytes::BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(line)) => out.push(Ok(line.to_vec())),
                Ok(None) => break,
                Err(e) => out.push(Err(e.to_string())),
            }
        }
    }
    loop {
        match codec.decode_eof(&mut buf) {
            Ok(Some(line)) => out.push(Ok(line.to_vec())),
            Ok(None) => break,
            Err(e) => out.push(Err(e.to_string())),
        }
    }
    out
}

proptest::proptest! {
    /// The framing is tokio-util's `AnyDelimiterCodec` with the one
    /// delimiter `\n`, whatever the input, the limit or how it arrives.
    #[test]
    fn lines_frame_exactly_as_any_delimiter_codec(
        input in proptest::collection::vec(
            proptest::prop_oneof![3 => proptest::num::u8::ANY, 1 => proptest::strategy::Just(b'\n')],
            0..300,
        ),
        max in 0usize..40,
        chunk in 1usize..50,
    ) {
        let reference = tokio_util::codec::AnyDelimiterCodec::new_with_max_length(
            b"\n".to_vec(),
            Vec::new(),
            max,
        );
        let want = decode_all(reference, &input, chunk);
        let got = decode_all(Lines::new(max), &input, chunk);
        proptest::prop_assert_eq!(got, want);
    }
}
