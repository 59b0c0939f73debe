use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use super::*;

/// Polls `fut` once: whether it is still waiting.
async fn pending_once<F: Future>(fut: std::pin::Pin<&mut F>) -> bool {
    let mut fut = fut;
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
}

/// Room given back while no task waits stays out of the semaphore (no
/// lock) and is what the next call takes.
#[test]
fn room_given_back_with_no_task_waiting_is_spare_and_taken_next() {
    let cap = Cap::new(2);
    assert!(cap.try_take());
    assert!(cap.try_take());
    assert!(!cap.try_take(), "the cap holds");
    assert_eq!(cap.held(), 2);
    cap.give_back(1);
    assert_eq!(cap.held(), 1);
    assert_eq!(cap.sem.available_permits(), 0, "not given to the semaphore");
    assert_eq!(cap.spare.load(Ordering::SeqCst), 1);
    assert!(cap.try_take(), "spare room is taken");
    assert!(!cap.try_take(), "the cap still holds");
    assert_eq!(cap.held(), 2);
}

/// Room split between the spare count and the semaphore is taken together.
#[test]
fn many_take_room_from_both_counts() {
    let cap = Cap::new(3);
    assert!(cap.try_take());
    assert!(cap.try_take());
    cap.give_back(1);
    assert!(!cap.try_take_many(3), "two free, not three");
    assert!(cap.try_take_many(2));
    assert_eq!(cap.held(), 3);
    assert!(!cap.try_take());
    cap.give_back(3);
    assert_eq!(cap.held(), 0);
    assert!(cap.try_take_many(3));
}

/// A waiting task gets the room given back; calls in place do not jump
/// ahead of it.
#[tokio::test]
async fn a_waiting_task_gets_room_given_back() {
    let cap = Cap::new(1);
    assert!(cap.try_take());
    let mut wait = std::pin::pin!(cap.take_many(1));
    assert!(pending_once(wait.as_mut()).await, "no room: it waits");
    cap.give_back(1);
    assert!(!cap.try_take(), "the waiting task comes first");
    assert!(!pending_once(wait.as_mut()).await, "served at once");
    assert_eq!(cap.held(), 1);
    assert_eq!(cap.waiting.load(Ordering::SeqCst), 0);
}

/// Spare room from before a task came is handed to it at once.
#[tokio::test]
async fn a_task_takes_spare_room() {
    let cap = Cap::new(2);
    assert!(cap.try_take());
    assert!(cap.try_take());
    cap.give_back(2);
    let mut wait = std::pin::pin!(cap.take_many(2));
    assert!(!pending_once(wait.as_mut()).await, "room for it at once");
    assert_eq!(cap.held(), 2);
}

/// A task that stops waiting takes nothing and no longer counts.
#[tokio::test]
async fn a_task_that_stops_waiting_takes_nothing() {
    let cap = Cap::new(1);
    assert!(cap.try_take());
    {
        let mut wait = std::pin::pin!(cap.take_many(1));
        assert!(pending_once(wait.as_mut()).await);
    }
    assert_eq!(cap.waiting.load(Ordering::SeqCst), 0);
    cap.give_back(1);
    assert_eq!(cap.held(), 0);
    assert!(cap.try_take(), "the room is free for a call in place");
}

/// Calls in place and waiting tasks on several threads: never more than
/// the cap held at once, and every task gets its room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_across_threads_and_every_task_is_served() {
    const MAX: usize = 3;
    let cap = Arc::new(Cap::new(MAX));
    let held = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let hold = |held: &AtomicUsize, peak: &AtomicUsize, n: usize| {
        let now = held.fetch_add(n, Ordering::SeqCst) + n;
        peak.fetch_max(now, Ordering::SeqCst);
    };
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (cap, held, peak) = (cap.clone(), held.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let mut taken = 0;
            while taken < 2_000 {
                if cap.try_take() {
                    hold(&held, &peak, 1);
                    held.fetch_sub(1, Ordering::SeqCst);
                    cap.give_back(1);
                    taken += 1;
                } else {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for n in 1..=2u32 {
        let (cap, held, peak) = (cap.clone(), held.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..500 {
                cap.take_many(n).await.expect("never closed");
                hold(&held, &peak, n as usize);
                held.fetch_sub(n as usize, Ordering::SeqCst);
                cap.give_back(n as usize);
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("every task is served")
            .expect("no panic");
    }
    assert!(peak.load(Ordering::SeqCst) <= MAX, "never above the cap");
    assert_eq!(cap.held(), 0);
    assert_eq!(cap.waiting.load(Ordering::SeqCst), 0);
}
