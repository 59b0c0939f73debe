//! The write queue's order, bounds, segments and wake-ups.

use super::*;

/// Every byte of a batch, in order.
fn flat(batch: &mut Segments) -> Vec<u8> {
    batch.drain(..).flat_map(String::into_bytes).collect()
}

#[tokio::test]
async fn lines_come_out_in_order_with_newlines_and_the_queue_is_bounded() {
    let queue = LineQueue::new(2);
    assert_eq!(queue.push("a".into()), Ok(()));
    assert_eq!(queue.push("bc".into()), Ok(()));
    assert_eq!(
        queue.push("d".into()),
        Err("d".into()),
        "a third line waits beyond capacity"
    );
    let mut batch = Segments::new();
    queue.take(&mut batch).await;
    assert_eq!(batch.len(), 1, "short lines share a segment");
    assert_eq!(flat(&mut batch), b"a\nbc\n");
    // Taking makes room again; the next batch holds only what came after.
    assert_eq!(queue.push("d".into()), Ok(()));
    queue.take(&mut batch).await;
    assert_eq!(flat(&mut batch), b"d\n");
}

#[tokio::test]
async fn long_lines_are_moved_and_short_ones_keep_their_place() {
    let queue = LineQueue::new(8);
    // Room for the `\n`, as a rendered request line has.
    let mut long = String::with_capacity(MOVE_BYTES + 1);
    long.push_str(&"x".repeat(MOVE_BYTES));
    let long_ptr = long.as_ptr();
    queue.push("a".into()).expect("room");
    let text = long.clone();
    queue.push(long).expect("room");
    queue.push("b".into()).expect("room");
    // Short lines that together pass a segment's size start a new one.
    let short = "y".repeat(MOVE_BYTES - 1);
    for _ in 0..5 {
        queue.push(short.clone()).expect("room");
    }
    let mut batch = Segments::new();
    queue.take(&mut batch).await;
    assert_eq!(batch[1].as_ptr(), long_ptr, "the long line was not copied");
    assert!(batch
        .iter()
        .all(|s| s.len() <= SEGMENT_BYTES.max(MOVE_BYTES + 1)));
    let mut expected = format!("a\n{text}\nb\n").into_bytes();
    for _ in 0..5 {
        expected.extend_from_slice(format!("{short}\n").as_bytes());
    }
    assert_eq!(flat(&mut batch), expected);
}

#[tokio::test]
async fn a_written_segment_is_reused_and_only_one_is_kept() {
    let queue = LineQueue::new(8);
    queue.push("a".into()).expect("room");
    let mut batch = Segments::new();
    queue.take(&mut batch).await;
    let segment = batch.pop_front().expect("one segment");
    let ptr = segment.as_ptr();
    let spare = |queue: &LineQueue| queue.pending.lock().spare.as_ref().map(|s| s.as_ptr());
    queue.recycle(segment);
    assert_eq!(spare(&queue), Some(ptr), "kept as the spare");
    queue.recycle(String::with_capacity(SEGMENT_BYTES));
    assert_eq!(spare(&queue), Some(ptr), "a second one is let go");
    queue.push("b".into()).expect("room");
    assert_eq!(spare(&queue), None, "the spare is in use");
    queue.take(&mut batch).await;
    assert_eq!(batch[0].as_ptr(), ptr, "the spare segment was reused");
    assert_eq!(flat(&mut batch), b"b\n");
}

#[tokio::test]
async fn lines_are_rendered_into_the_segment_and_a_failed_one_leaves_nothing() {
    let queue = LineQueue::new(3);
    let render = |text: &'static str| {
        move |out: &mut String| -> Result<(), &'static str> {
            assert_eq!(out.capacity(), SEGMENT_BYTES, "rendered into a segment");
            out.push_str(text);
            Ok(())
        }
    };
    assert_eq!(queue.push_with(8, render("first")), Ok(5));
    // A failed rendering takes back what it wrote, and counts no line.
    let failed = queue.push_with(8, |out: &mut String| {
        out.push_str("half");
        Err("bad")
    });
    assert_eq!(failed, Err(Refused::Render("bad")));
    queue.push("moved".into()).expect("room");
    // A line longer than the estimate is written whole all the same.
    assert_eq!(queue.push_with(4, render("second, longer")), Ok(14));
    assert_eq!(queue.push_with(8, render("x")), Err(Refused::Full));
    let mut batch = Segments::new();
    queue.take(&mut batch).await;
    assert_eq!(batch.len(), 1, "short lines share one segment");
    let segment = batch.front().expect("one segment");
    assert_eq!(segment.capacity(), SEGMENT_BYTES, "rendered in place");
    assert_eq!(flat(&mut batch), b"first\nmoved\nsecond, longer\n");
    // A long line gets its own string, moved in: the one rendered.
    let long = "y".repeat(MOVE_BYTES);
    let len = long.len();
    let got = queue.push_with(MOVE_BYTES + 2, |out: &mut String| -> Result<(), ()> {
        assert_eq!(out.capacity(), MOVE_BYTES + 2, "a string of its own");
        out.push_str(&long);
        Ok(())
    });
    assert_eq!(got, Ok(len));
    queue.take(&mut batch).await;
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].capacity(), MOVE_BYTES + 2, "moved, not copied");
    assert_eq!(flat(&mut batch), format!("{long}\n").into_bytes());
}

#[test]
fn a_failed_rendering_gives_back_the_segment_it_started() {
    let queue = LineQueue::new(3);
    let failed = queue.push_with(8, |out: &mut String| {
        out.push_str("half");
        Err(())
    });
    assert_eq!(failed, Err(Refused::Render(())));
    let pending = queue.pending.lock();
    assert!(pending.segments.is_empty(), "no empty segment queued");
    assert_eq!(pending.lines, 0);
    let spare = pending.spare.as_ref().expect("kept as the spare");
    assert!(spare.is_empty() && spare.capacity() == SEGMENT_BYTES);
}

#[test]
fn a_segment_grown_past_its_size_by_a_failed_rendering_is_not_kept() {
    let queue = LineQueue::new(3);
    // Estimated short, rendered long (a method that needed escaping), then
    // refused (above the upstream's limit): the segment grew for nothing.
    let failed = queue.push_with(8, |out: &mut String| {
        out.push_str(&"x".repeat(2 * SEGMENT_BYTES));
        Err(())
    });
    assert_eq!(failed, Err(Refused::Render(())));
    let pending = queue.pending.lock();
    assert!(pending.segments.is_empty());
    assert!(
        pending.spare.is_none(),
        "only a segment of SEGMENT_BYTES is kept"
    );
}

#[test]
fn a_closed_queue_refuses_rendered_lines_without_rendering_them() {
    let queue = LineQueue::new(3);
    queue.close();
    let got = queue.push_with(8, |_: &mut String| -> Result<(), ()> {
        panic!("rendered for a closed queue")
    });
    assert_eq!(got, Err(Refused::Full));
}

#[tokio::test]
async fn a_waiting_writer_wakes_for_the_first_line() {
    let queue = LineQueue::new(4);
    let writer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut batch = Segments::new();
            queue.take(&mut batch).await;
            flat(&mut batch)
        })
    };
    // One runtime thread: the writer runs until it waits for a line.
    tokio::task::yield_now().await;
    queue.push("x".into()).expect("room");
    let batch = tokio::time::timeout(std::time::Duration::from_secs(30), writer)
        .await
        .expect("the writer was woken");
    assert_eq!(batch.expect("writer"), b"x\n");
}

#[test]
fn a_closed_queue_refuses_lines() {
    let queue = LineQueue::new(4);
    queue.push("a".into()).expect("room");
    queue.close();
    assert_eq!(queue.push("b".into()), Err("b".into()));
    assert_eq!(queue.pending.lock().lines, 0, "what waited was let go");
}

#[test]
fn binary_frames_are_refused_by_a_line_queue() {
    let outlet = Outlet::Lines(LineQueue::new(4));
    assert_eq!(
        outlet.try_send(Wire::Binary(vec![1].into())),
        Err(Wire::Binary(vec![1].into()))
    );
}

/// A WebSocket link's short text frames are split off one frame buffer
/// in order; a long one keeps an allocation of its own; a full queue
/// refuses.
#[test]
fn short_text_frames_share_the_link_frame_buffer() {
    let (tx, mut rx) = mpsc::channel(3);
    let frames = FrameQueue::new(tx);
    let long = "x".repeat(SMALL + 1);
    assert!(frames.try_send_text("first"));
    assert!(frames.try_send_text("second"));
    assert!(frames.try_send_text(&long));
    assert!(!frames.try_send_text("third"), "the queue holds 3");
    let mut got = Vec::new();
    while let Ok(wire) = rx.try_recv() {
        got.push(wire);
    }
    let [Wire::Shared(a), Wire::Shared(b), Wire::Text(c)] = &got[..] else {
        panic!("two shared frames and a long one: {got:?}");
    };
    assert_eq!(
        (a.as_str(), b.as_str(), c.as_str()),
        ("first", "second", long.as_str())
    );
    // Split off the same buffer, one after the other.
    let (a, b) = (a.as_str().as_bytes(), b.as_str().as_bytes());
    assert_eq!(a.as_ptr_range().end, b.as_ptr());
}

/// Binary frames (Sideband requests) go the same way: short ones split
/// off the one frame buffer, after the text frames queued before them.
#[test]
fn short_binary_frames_share_the_link_frame_buffer() {
    let (tx, mut rx) = mpsc::channel(4);
    let frames = FrameQueue::new(tx);
    let long = vec![7u8; SMALL + 1];
    assert!(frames.try_send_text("text"));
    assert!(frames.try_send_binary(&[1, 2, 3]));
    assert!(frames.try_send_binary(&long));
    assert!(frames.try_send_binary(&[4]));
    assert!(!frames.try_send_binary(&[5]), "the queue holds 4");
    let mut got = Vec::new();
    while let Ok(wire) = rx.try_recv() {
        got.push(wire);
    }
    let [Wire::Shared(text), Wire::Binary(a), Wire::Binary(c), Wire::Binary(b)] = &got[..] else {
        panic!("a text, two short binary frames and a long one: {got:?}");
    };
    assert_eq!(
        (&a[..], &b[..], &c[..]),
        (&[1, 2, 3][..], &[4][..], &long[..])
    );
    let text = text.as_str().as_bytes();
    assert_eq!(text.as_ptr_range().end, a.as_ptr(), "after the text frame");
    assert_eq!(
        a.as_ptr_range().end,
        b.as_ptr(),
        "the long frame is not in the buffer"
    );
}

/// Once the writer is gone, both kinds of queue say so (a refused call
/// is then answered `unavailable`, not "write queue full").
#[test]
fn a_queue_whose_writer_is_gone_says_so() {
    let (tx, rx) = mpsc::channel(3);
    let frames = Outlet::Frames(FrameQueue::new(tx));
    assert!(!frames.is_closed());
    drop(rx);
    assert!(frames.is_closed());
    let refused = frames.frames().is_some_and(|f| !f.try_send_text("late"));
    assert!(refused, "a frame link refuses once its writer is gone");
    let queue = LineQueue::new(4);
    let lines = Outlet::Lines(queue.clone());
    assert!(!lines.is_closed());
    queue.close();
    assert!(lines.is_closed());
}
