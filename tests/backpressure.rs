//! Back-pressure, not rejection, with the shipped defaults: many clients
//! pipelining far more requests than one upstream takes at once all get
//! their answers; requests wait for the upstream instead of failing.

mod common;

use std::collections::HashSet;

use common::clients::{Speak, TestClient};
use common::{json, Stack};
use switchyard::daemon::DaemonOptions;

const CLIENTS: usize = 50;
const PIPELINED: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_pipelining_two_hundred_requests_each_get_every_answer_with_the_defaults() {
    // Nothing but the listener, the upstream and the route: the defaults.
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let clients = (0..CLIENTS).map(|c| {
        let url = stack.url.clone();
        tokio::spawn(async move {
            let mut client = TestClient::connect(Speak::JsonRpc, &url).await;
            for i in 0..PIPELINED {
                client
                    .send(&format!(
                        r#"{{"jsonrpc":"2.0","method":"echo","params":{{"c":{c},"i":{i}}},"id":"{c}-{i}"}}"#
                    ))
                    .await;
            }
            let mut seen = HashSet::new();
            for _ in 0..PIPELINED {
                let v = json(&client.recv().await);
                let id = v["id"].as_str().expect("string id").to_owned();
                let (c2, i) = id.split_once('-').expect("id shape");
                assert_eq!(c2, c.to_string(), "misrouted: {v}");
                let i: usize = i.parse().expect("index");
                assert_eq!(v["result"], serde_json::json!({"c": c, "i": i}), "{v}");
                assert!(seen.insert(i), "answered twice: {v}");
            }
            seen.len()
        })
    });
    let mut answered = 0;
    for c in futures_util::future::join_all(clients).await {
        answered += c.expect("client");
    }
    assert_eq!(answered, CLIENTS * PIPELINED, "lost answers");
    let errors: f64 = ["resource_exhausted", "timeout", "unavailable", "internal"]
        .iter()
        .map(|o| {
            stack.counter(
                "switchyard_requests_total",
                &[
                    ("listener", "public"),
                    ("upstream", "daemon"),
                    ("outcome", o),
                ],
            )
        })
        .sum();
    assert_eq!(errors, 0.0);
    stack.gateway.shutdown().await;
}
