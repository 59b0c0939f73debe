//! The batch writer and the line reader, on a real socket pair.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

use super::{write_segments, LineReader, SLICES};
use crate::upstream::driver::Incoming;
use crate::upstream::error::LinkError;
use crate::upstream::outlet::Segments;

/// A socket that counts the write calls made on it.
struct Counted {
    inner: UnixStream,
    writes: usize,
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.writes += 1;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.writes += 1;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn segments(sizes: impl IntoIterator<Item = usize>) -> Segments {
    sizes
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let mut s: String = std::iter::repeat_n(char::from(b'a' + (i % 26) as u8), n).collect();
            if n > 0 {
                s.pop();
                s.push('\n');
            }
            s
        })
        .collect()
}

async fn read_all(mut from: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut got = Vec::new();
    from.read_to_end(&mut got).await.expect("read");
    got
}

/// Short segments that the socket takes at once go out in one write call.
#[tokio::test]
async fn segments_ready_together_go_out_in_one_write() {
    let (a, b) = UnixStream::pair().expect("socket pair");
    let reader = tokio::spawn(read_all(b));
    let batch = segments([100, 2_000, 0, 37, 16 * 1024, 5]);
    let mut out = Counted {
        inner: a,
        writes: 0,
    };
    write_segments(&mut out, &batch).await.expect("written");
    assert_eq!(out.writes, 1);
    drop(out);
    let want: String = batch.iter().map(String::as_str).collect();
    assert_eq!(reader.await.expect("reader"), want.as_bytes());
}

/// More segments than one call takes, and more bytes than the socket
/// buffers, arrive whole and in order: partial writes continue where they
/// stopped.
#[tokio::test]
async fn partial_writes_continue_where_they_stopped() {
    let (a, b) = UnixStream::pair().expect("socket pair");
    let reader = tokio::spawn(read_all(b));
    let sizes = (0..3 * SLICES + 7).map(|i| [1, 300, 4_096, 16 * 1024, 70_000][i % 5]);
    let batch = segments(sizes);
    let mut out = Counted {
        inner: a,
        writes: 0,
    };
    write_segments(&mut out, &batch).await.expect("written");
    assert!(
        out.writes >= 4,
        "{} calls for {} slices",
        out.writes,
        batch.len()
    );
    drop(out);
    let want: String = batch.iter().map(String::as_str).collect();
    let got = reader.await.expect("written");
    assert_eq!(got.len(), want.len());
    assert!(got == want.as_bytes(), "bytes differ or are out of order");
}

/// An empty batch writes nothing.
#[tokio::test]
async fn an_empty_batch_writes_nothing() {
    let (a, _b) = UnixStream::pair().expect("socket pair");
    let mut out = Counted {
        inner: a,
        writes: 0,
    };
    write_segments(&mut out, &Segments::new())
        .await
        .expect("written");
    write_segments(&mut out, &segments([0, 0]))
        .await
        .expect("written");
    assert_eq!(out.writes, 0);
}

/// The next line's text, or what came instead.
async fn text(lines: &mut LineReader<UnixStream>) -> String {
    match lines.next().await {
        Some(Incoming::Text(text)) => text.to_string(),
        other => panic!("expected a line, got {other:?}"),
    }
}

/// Lines come out as the framing had them: without `\r`, blank and
/// whitespace-only lines skipped, a line that is not UTF-8 reported and
/// the framing intact after it, a line that arrives in two reads whole,
/// and the last line without its `\n` at EOF, then the end.
#[tokio::test]
async fn the_line_reader_frames_lines_as_they_arrive() {
    let (mut a, b) = UnixStream::pair().expect("socket pair");
    let mut lines = LineReader::new(b, 64);
    a.write_all(b"one\r\n\n \t\r\n\xff\xfe\npar")
        .await
        .expect("write");
    assert_eq!(text(&mut lines).await, "one");
    assert!(matches!(lines.next().await, Some(Incoming::NotUtf8)));
    a.write_all(b"tial\nlast").await.expect("write");
    assert_eq!(text(&mut lines).await, "partial");
    a.shutdown().await.expect("shutdown");
    assert_eq!(text(&mut lines).await, "last");
    assert!(lines.next().await.is_none());
    assert!(lines.next().await.is_none());
}

/// A line of exactly the limit is read; a longer one fails the link with
/// `TooLarge`, and nothing is read after it.
#[tokio::test]
async fn a_line_over_the_limit_fails_and_ends_the_lines() {
    let (mut a, b) = UnixStream::pair().expect("socket pair");
    let mut lines = LineReader::new(b, 8);
    a.write_all(b"12345678\n123456789\nafter\n")
        .await
        .expect("write");
    assert_eq!(text(&mut lines).await, "12345678");
    assert!(matches!(
        lines.next().await,
        Some(Incoming::Failed(LinkError::TooLarge { limit: 8 }))
    ));
    assert!(lines.next().await.is_none());
}

/// A line longer than the initial read buffer, written in pieces, arrives
/// whole, and the line after it too.
#[tokio::test]
async fn a_long_line_grows_the_buffer_and_arrives_whole() {
    let (mut a, b) = UnixStream::pair().expect("socket pair");
    let mut lines = LineReader::new(b, 200_000);
    let long = "x".repeat(150_000);
    let sent = long.clone();
    let writer = tokio::spawn(async move {
        for piece in sent.as_bytes().chunks(10_000) {
            a.write_all(piece).await.expect("write");
        }
        a.write_all(b"\nnext\n").await.expect("write");
        a
    });
    assert_eq!(text(&mut lines).await, long);
    assert_eq!(text(&mut lines).await, "next");
    drop(writer.await.expect("writer"));
    assert!(lines.next().await.is_none());
}
