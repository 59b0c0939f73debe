//! The persistent-subscription calls the persist scenario makes over
//! switchyard's JSON-RPC WebSocket listener: opening (or resuming) a
//! subscription, acknowledging a delivery, probing the topic's last
//! sequence, and resuming the detached subscription's backlog.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::{timeout_at, Instant};

use super::super::conn::{Buffers, Endpoint, Rx, Tx};
use super::super::feed::{number, TOPIC};
use super::super::wire::{Out, Wire};

/// How long any one reply or the backlog's growth may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// The detached subscription's id.
pub(super) const BACKLOG_ID: &str = "bench-backlog";
/// The throwaway subscription that reads the topic's last sequence.
const PROBE_ID: &str = "bench-probe";
/// Pause between probes of the backlog's growth.
const PROBE_EVERY: Duration = Duration::from_millis(200);

/// Connects and opens subscription `id`; returns the connection and
/// `resumed_from_sequence`.
pub(super) async fn open(endpoint: &Endpoint, id: &str) -> anyhow::Result<((Tx, Rx), u64)> {
    let (mut tx, mut rx) = endpoint
        .connect(Wire::JsonRpc, Buffers::Default)
        .await
        .context("connecting a persistent subscriber")?;
    let request = format!(
        r#"{{"jsonrpc":"2.0","method":"rpc.subscribe.persistent","params":{{"subscription_id":"{id}","topic":"{TOPIC}"}},"id":"open"}}"#
    );
    tx.feed(Out::Text(request)).await?;
    tx.flush().await?;
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let Ok(Some(Ok(msg))) = timeout_at(deadline, rx.recv()).await else {
            bail!("no answer to rpc.subscribe.persistent for {id}");
        };
        let text = msg.text().unwrap_or_default();
        if text.contains(r#""id":"open""#) {
            let Some(from) = number(text, r#""resumed_from_sequence":"#) else {
                bail!("rpc.subscribe.persistent for {id} failed: {text}");
            };
            return Ok(((tx, rx), from));
        }
    }
}

/// Waits until `want` messages are stored after `from`, then resumes the
/// detached subscription and takes the time to receive them all.
pub(super) async fn resume(
    endpoint: &Endpoint,
    from: u64,
    want: u64,
) -> anyhow::Result<(u64, Duration)> {
    let deadline = Instant::now() + STEP_TIMEOUT + Duration::from_millis(want);
    while last_seq(endpoint).await? < from + want {
        if Instant::now() > deadline {
            bail!("the backlog never reached {want} messages");
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    let began = Instant::now();
    let ((mut tx, mut rx), resumed) = open(endpoint, BACKLOG_ID).await?;
    if resumed != from {
        bail!("the backlog subscription resumed from {resumed}, not {from}");
    }
    let deadline = began + STEP_TIMEOUT;
    let mut received = 0;
    while received < want {
        let Ok(Some(Ok(msg))) = timeout_at(deadline, rx.recv()).await else {
            bail!("the resumed subscription stalled after {received} of {want}");
        };
        let text = msg.text().unwrap_or_default();
        if let Some(seq) = number(text, r#""sequence_id":"#) {
            received += 1;
            tx.feed(Out::Text(ack(BACKLOG_ID, seq))).await?;
            tx.flush().await?;
        }
    }
    Ok((want, began.elapsed()))
}

/// The topic's last sequence: what a new subscription reports, through a
/// throwaway one deleted at once.
async fn last_seq(endpoint: &Endpoint) -> anyhow::Result<u64> {
    let ((mut tx, mut rx), last) = open(endpoint, PROBE_ID).await?;
    let delete = format!(
        r#"{{"jsonrpc":"2.0","method":"rpc.unsubscribe.persistent","params":{{"subscription_id":"{PROBE_ID}"}},"id":"del"}}"#
    );
    tx.feed(Out::Text(delete)).await?;
    tx.flush().await?;
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        match timeout_at(deadline, rx.recv()).await {
            Ok(Some(Ok(msg))) if msg.text().is_some_and(|t| t.contains(r#""id":"del""#)) => {
                return Ok(last)
            }
            Ok(Some(Ok(_))) => {}
            _ => bail!("no answer to rpc.unsubscribe.persistent"),
        }
    }
}

/// The `rpc.acknowledge.persistent` call for delivery `seq` of `id`.
pub(super) fn ack(id: &str, seq: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"rpc.acknowledge.persistent","params":{{"subscription_id":"{id}","sequence_id":{seq}}},"id":{seq}}}"#
    )
}
