//! The byte budget (`outbox_max_bytes`): offers over it are dropped, a
//! frame larger than it goes out alone, replies wait for bytes, and replies
//! waiting over it make the client slow.

use super::*;

fn text(n: usize) -> Outgoing {
    Outgoing::Text("x".repeat(n).into())
}

#[tokio::test]
async fn an_offer_over_the_byte_budget_is_dropped_though_messages_have_room() {
    let (outbox, mut reader, high) = outbox(Duration::from_secs(60));
    // Two frames of 3 KiB fill the 6 KiB budget; a third does not fit,
    // though the queue has room for two more messages.
    assert_eq!(outbox.offer_frame(text(3 * 1024)), Offer::Queued);
    assert_eq!(outbox.offer_frame(text(3 * 1024)), Offer::Queued);
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    assert_eq!(reader.rx.len(), 2);
    assert_eq!(high.get(), i64::try_from(BUDGET).unwrap());
    // The writer takes one out: room again.
    assert!(reader.recv().await.is_some());
    assert_eq!(outbox.offer_frame(text(1)), Offer::Queued);
}

#[tokio::test]
async fn a_frame_larger_than_the_budget_goes_out_alone() {
    let (outbox, mut reader, _) = outbox(Duration::from_secs(60));
    // An empty queue takes one frame of any size, offered or sent...
    assert_eq!(outbox.offer_frame(text(BUDGET * 2)), Offer::Queued);
    // ...and nothing more fits beside it.
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    assert!(reader.recv().await.is_some());
    tokio::time::timeout(Duration::from_secs(30), outbox.send_frame(text(BUDGET * 2)))
        .await
        .expect("a reply larger than the budget is queued at once when the queue is empty");
    assert_eq!(reader.rx.len(), 1);
}

#[tokio::test]
async fn a_reply_waits_for_bytes_and_offers_yield_to_it() {
    let (outbox, mut reader, high) = outbox(Duration::from_secs(60));
    assert_eq!(outbox.offer_frame(text(BUDGET - 100)), Offer::Queued);
    // A reply of 1 KiB does not fit: it waits.
    let o = outbox.clone();
    let reply = tokio::spawn(async move { o.send_frame(text(1024)).await });
    while outbox.inner.budget().held() < i64::try_from(BUDGET - 100 + 1024).unwrap() {
        tokio::task::yield_now().await;
    }
    // The gauge counts it as waiting; an offer that would fit is refused
    // while it waits.
    assert_eq!(high.get(), i64::try_from(BUDGET - 100 + 1024).unwrap());
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    // The writer takes bytes out: the reply gets in.
    assert!(reader.recv().await.is_some());
    tokio::time::timeout(Duration::from_secs(30), reply)
        .await
        .expect("the reply got room")
        .unwrap();
    assert_eq!(reader.rx.len(), 1);
    assert!(!outbox.slow().is_cancelled());
}

#[tokio::test]
async fn a_queue_over_budget_for_the_patience_makes_the_client_slow() {
    let (outbox, _reader, _) = outbox(Duration::from_millis(50));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    // Nobody reads: the waiting reply gives up, and the client is slow.
    tokio::time::timeout(Duration::from_secs(30), outbox.send_frame(text(1)))
        .await
        .expect("the reply gave up");
    assert!(outbox.slow().is_cancelled());
    assert_eq!(outbox.inner.budget().held(), i64::try_from(BUDGET).unwrap());
}

#[tokio::test]
async fn an_offer_dropped_for_bytes_makes_the_client_slow_if_no_room_comes() {
    let (outbox, _reader, _) = outbox(Duration::from_millis(50));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    tokio::time::timeout(Duration::from_secs(30), outbox.slow().cancelled())
        .await
        .expect("the client became slow");
}

/// Waits until the budget holds `bytes` (queued plus waiting).
async fn until_held(outbox: &Outbox, bytes: usize) {
    let bytes = i64::try_from(bytes).unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while outbox.inner.budget().held() != bytes {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the budget came to hold the bytes");
}

#[tokio::test]
async fn a_single_reply_larger_than_the_budget_may_wait() {
    let (outbox, mut reader, _) = outbox(Duration::from_secs(60));
    assert_eq!(outbox.offer_frame(text(1)), Offer::Queued);
    // Alone, a reply of twice the budget waits (as it would go into an
    // empty queue): the client is not slow for it.
    let o = outbox.clone();
    let reply = tokio::spawn(async move { o.inner.queue(text(2 * BUDGET)).await });
    until_held(&outbox, 1 + 2 * BUDGET).await;
    assert!(!outbox.slow().is_cancelled());
    // The writer takes the small frame out: the large reply gets in.
    assert!(reader.recv().await.is_some());
    let waited = tokio::time::timeout(Duration::from_secs(30), reply)
        .await
        .expect("the reply got room")
        .unwrap();
    assert_eq!(waited, Waited::Ready);
    assert_eq!(reader.rx.len(), 1);
    assert!(!outbox.slow().is_cancelled());
}

#[tokio::test]
async fn a_second_reply_over_the_waiting_budget_makes_the_client_slow_at_once() {
    // The patience is far longer than the failure guards: only the bytes
    // waiting can make the client slow here.
    let (outbox, _reader, _) = outbox(Duration::from_secs(600));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    // The first reply waits; a second that fits beside it waits too.
    let mut waiting = Vec::new();
    for n in [4 * 1024, BUDGET - 4 * 1024] {
        let o = outbox.clone();
        waiting.push(tokio::spawn(async move { o.inner.queue(text(n)).await }));
    }
    until_held(&outbox, 2 * BUDGET).await;
    assert!(!outbox.slow().is_cancelled());
    // One byte more does not wait: the client is slow now, the reply is
    // dropped (its bytes are not held), whatever path it takes.
    let waited = tokio::time::timeout(Duration::from_secs(30), outbox.inner.queue(text(1)))
        .await
        .expect("the reply did not wait");
    assert_eq!(waited, Waited::Over);
    assert!(outbox.slow().is_cancelled());
    let delivered = tokio::time::timeout(Duration::from_secs(30), outbox.deliver_frame(text(1)))
        .await
        .expect("the delivery did not wait");
    assert_eq!(delivered, Offer::Closed);
    assert_eq!(
        outbox.inner.budget().held(),
        i64::try_from(2 * BUDGET).unwrap()
    );
    for w in waiting {
        assert!(!w.is_finished(), "the replies that fit still wait");
        w.abort();
    }
}

#[tokio::test]
async fn a_settled_reply_over_the_waiting_budget_frees_its_slot() {
    let (outbox, _reader, _) = outbox(Duration::from_secs(600));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    let o = outbox.clone();
    let first = tokio::spawn(async move { o.inner.queue(text(BUDGET)).await });
    until_held(&outbox, 2 * BUDGET).await;
    // The queue is full: the reply goes to a task, which finds no room for
    // it among the replies waiting; the client is slow and the slot freed.
    let reply = Message::Notification {
        method: "m".repeat(64).into(),
        params: None,
    };
    let (slot, freed) = tokio::sync::oneshot::channel::<()>();
    assert!(outbox.settle(&reply, slot));
    tokio::time::timeout(Duration::from_secs(30), freed)
        .await
        .expect("the slot was freed")
        .unwrap_err();
    assert!(outbox.slow().is_cancelled());
    assert_eq!(
        outbox.inner.budget().held(),
        i64::try_from(2 * BUDGET).unwrap()
    );
    first.abort();
}

#[tokio::test]
async fn a_reply_that_fits_goes_in_at_once_while_the_waiting_budget_is_full() {
    let (outbox, mut reader, high) = outbox(Duration::from_secs(600));
    assert_eq!(outbox.offer_frame(text(1024)), Offer::Queued);
    // A reply of the whole budget waits: the waiting bytes are at the
    // budget.
    let o = outbox.clone();
    let waiting = tokio::spawn(async move { o.inner.queue(text(BUDGET)).await });
    until_held(&outbox, 1024 + BUDGET).await;
    // Replies that fit the queue are queued at once, not counted as
    // waiting, and do not make the client slow.
    for _ in 0..2 {
        let waited = tokio::time::timeout(Duration::from_secs(30), outbox.inner.queue(text(1024)))
            .await
            .expect("queued at once");
        assert_eq!(waited, Waited::Ready);
    }
    assert_eq!(outbox.inner.budget().queued(), 3 * 1024);
    assert_eq!(
        outbox.inner.budget().held(),
        i64::try_from(3 * 1024 + BUDGET).unwrap()
    );
    assert_eq!(high.get(), i64::try_from(3 * 1024 + BUDGET).unwrap());
    assert!(!outbox.slow().is_cancelled());
    // The queue drains: the waiting reply gets in.
    for _ in 0..3 {
        assert!(reader.recv().await.is_some());
    }
    let waited = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the reply got room")
        .unwrap();
    assert_eq!(waited, Waited::Ready);
    assert!(!outbox.slow().is_cancelled());
}
