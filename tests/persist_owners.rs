//! A persistent subscription belongs to the identity that made it
//! (`persist::owner`), and caps bound what one identity, one connection
//! and one topic may take: one identity probing for another's
//! subscriptions and trying to exhaust the store, replayed.
//!
//! The gateway (in process, memory backend) has the harness' `public`
//! listener (no credential: its own identity) plus `victim` and `intruder`
//! with an `auth_token` each, all routed to the reference JSON-RPC daemon
//! (`upstream events`); a `push` call through `public` makes the daemon
//! send a notification the gateway publishes (and stores) as
//! `events.<method>`. Clients are raw WebSockets (tokio-tungstenite).
//!
//! Waiting is on events (a reply, a notification); "nothing else arrived"
//! is shown by publishing a later message and seeing it come first.

mod common;

use common::persist_node::Persist;
use common::{connect, json, recv, send, Ws};
use serde_json::{json, Value};

const SUBSCRIBE: &str = "rpc.subscribe.persistent";
const ACK: &str = "rpc.acknowledge.persistent";
const UNSUBSCRIBE: &str = "rpc.unsubscribe.persistent";
const SUBSCRIBE_BATCH: &str = "rpc.subscribe.persistent.batch";

const LISTENERS: &str = r#"
[listeners.victim]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/victim"
auth_token = "victim-token"

[listeners.intruder]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/intruder"
auth_token = "intruder-token"
"#;

/// One WebSocket client: calls by id, notifications kept in order.
struct Peer {
    ws: Ws,
    next: u64,
    notes: std::collections::VecDeque<Value>,
}

impl Peer {
    async fn open(url: &str) -> Peer {
        Peer {
            ws: connect(url).await,
            next: 1,
            notes: Default::default(),
        }
    }

    async fn with_token(stack: &Persist, listener: &str, token: &str) -> Peer {
        Peer::open(&format!("{}?token={token}", stack.urls[listener])).await
    }

    /// The whole response (`result` or `error`) to `method`.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        send(&mut self.ws, &req.to_string()).await;
        loop {
            let frame = json(&recv(&mut self.ws).await);
            if frame["id"] == json!(id) {
                return frame;
            }
            assert_eq!(frame["method"], "rpc.notification.persistent", "{frame}");
            self.notes.push_back(frame["params"].clone());
        }
    }

    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let reply = self.call(method, params.clone()).await;
        assert!(reply.get("error").is_none(), "{method} {params}: {reply}");
        reply["result"].clone()
    }

    /// The next persistent notification's params.
    async fn note(&mut self) -> Value {
        if let Some(n) = self.notes.pop_front() {
            return n;
        }
        let frame = json(&recv(&mut self.ws).await);
        assert_eq!(frame["method"], "rpc.notification.persistent", "{frame}");
        frame["params"].clone()
    }

    async fn seqs(&mut self, n: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.note().await["sequence_id"].as_u64().expect("seq"));
        }
        out
    }
}

fn sub(id: &str, topic: &str) -> Value {
    json!({"subscription_id": id, "topic": topic})
}

fn ack(id: &str, seq: u64) -> Value {
    json!({"subscription_id": id, "sequence_id": seq})
}

async fn publish(p: &mut Peer, n: u64) {
    for i in 0..n {
        p.ok("push", json!({"method": "orders", "params": {"i": i}}))
            .await;
    }
}

fn error(reply: &Value) -> (i64, String) {
    let e = &reply["error"];
    let code = e["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error: {reply}"));
    (code, e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_identity_can_neither_read_move_nor_delete_a_subscription() {
    let stack = Persist::start_with(LISTENERS, "").await;
    let mut publisher = Peer::open(&stack.url).await;
    let mut victim = Peer::with_token(&stack, "victim", "victim-token").await;
    let first = victim.ok(SUBSCRIBE, sub("victim-1", "events.orders")).await;
    assert_eq!(first["resumed_from_sequence"], 0);
    publish(&mut publisher, 2).await;
    assert_eq!(victim.seqs(2).await, [1, 2]);
    for seq in [1, 2] {
        victim.ok(ACK, ack("victim-1", seq)).await;
    }
    // Detached, position kept; 3..5 stored meanwhile.
    drop(victim);
    stack.attached(0).await;
    publish(&mut publisher, 3).await;

    // Another token on another listener names the same id: an ack or an
    // unsubscribe of it is exactly that of an id that does not exist.
    let mut intruder = Peer::with_token(&stack, "intruder", "intruder-token").await;
    let foreign = intruder.call(ACK, ack("victim-1", 3)).await;
    let unknown = intruder.call(ACK, ack("nobody-1", 3)).await;
    let (code, detail) = error(&foreign);
    assert_eq!(code, -32003, "{foreign}");
    assert_eq!(
        detail.replace("victim-1", "nobody-1"),
        error(&unknown).1,
        "the same error as an unknown id"
    );
    assert!(!detail.contains("events.orders"), "{detail}");
    // Subscribing creates the intruder's own subscription: after the
    // topic's last message, with none of the victim's.
    let own = intruder
        .ok(SUBSCRIBE, sub("victim-1", "events.orders"))
        .await;
    assert_eq!(own["resumed_from_sequence"], 5, "a fresh subscription");
    // It acknowledges what it was sent (nothing yet): 3 was never its.
    let (code, _) = error(&intruder.call(ACK, ack("victim-1", 3)).await);
    assert_eq!(code, -32602);
    intruder
        .ok(UNSUBSCRIBE, json!({"subscription_id": "victim-1"}))
        .await;
    // The listener without a credential deletes "victim-1": its own, none.
    let mut anon = Peer::open(&stack.url).await;
    let gone = anon
        .ok(UNSUBSCRIBE, json!({"subscription_id": "victim-1"}))
        .await;
    assert_eq!(gone, json!({"unsubscribed": true}));

    // The owner resumes where it was: 3, 4, 5, nothing acknowledged by
    // anyone else, then the live 6.
    let mut victim = Peer::with_token(&stack, "victim", "victim-token").await;
    let resumed = victim.ok(SUBSCRIBE, sub("victim-1", "events.orders")).await;
    assert_eq!(resumed["resumed_from_sequence"], 2);
    assert_eq!(victim.seqs(3).await, [3, 4, 5]);
    publish(&mut publisher, 1).await;
    assert_eq!(victim.seqs(1).await, [6]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_id_of_another_identity_is_not_a_conflict() {
    let stack = Persist::start_with(LISTENERS, "").await;
    let mut victim = Peer::with_token(&stack, "victim", "victim-token").await;
    victim
        .ok(SUBSCRIBE, sub("shared-name", "events.orders"))
        .await;
    // Held by the victim right now: the intruder's subscribe is its own
    // subscription, never -32005 naming the victim's topic.
    let mut intruder = Peer::with_token(&stack, "intruder", "intruder-token").await;
    let own = intruder
        .ok(SUBSCRIBE, sub("shared-name", "events.p.secret"))
        .await;
    assert_eq!(own["topic"], "events.p.secret");
    stack.stop().await;
}

/// Caps small enough to reach: 3 per identity, 2 per connection, 3 held
/// per topic.
const CAPS: &str = r#"
[persistence]
max_subscriptions_per_client = 3
max_subscriptions_per_connection = 2
max_subscriptions_per_topic = 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_per_connection_and_per_identity_leave_room_for_others() {
    let stack = Persist::start_with(LISTENERS, CAPS).await;
    let mut a = Peer::open(&stack.url).await;
    a.ok(SUBSCRIBE, sub("a1", "events.p.1")).await;
    a.ok(SUBSCRIBE, sub("a2", "events.p.2")).await;
    let third = a.call(SUBSCRIBE, sub("a3", "events.p.3")).await;
    let (code, detail) = error(&third);
    assert_eq!(code, -32007, "{third}");
    assert!(detail.contains("per connection"), "{detail}");
    // A repeat of one it holds is no new subscription.
    a.ok(SUBSCRIBE, sub("a1", "events.p.1")).await;

    // A second connection of the same identity: one more, then the
    // identity's cap (detached ones count too).
    let mut b = Peer::open(&stack.url).await;
    b.ok(SUBSCRIBE, sub("a3", "events.p.3")).await;
    let fourth = b.call(SUBSCRIBE, sub("a4", "events.p.4")).await;
    let (code, detail) = error(&fourth);
    assert_eq!(code, -32007, "{fourth}");
    assert!(detail.contains("per client"), "{detail}");
    drop(a);
    stack.attached(1).await;
    let (code, _) = error(&b.call(SUBSCRIBE, sub("a4", "events.p.4")).await);
    assert_eq!(code, -32007, "detached subscriptions still count");
    // A batch past the cap creates nothing (all or nothing).
    let batch = json!({"subscriptions": [sub("a1", "events.p.1"), sub("a5", "events.p.5")]});
    let (code, _) = error(&b.call(SUBSCRIBE_BATCH, batch).await);
    assert_eq!(code, -32007);
    // Deleting one makes room again.
    b.ok(UNSUBSCRIBE, json!({"subscription_id": "a1"})).await;
    b.ok(SUBSCRIBE, sub("a4", "events.p.4")).await;

    // Another identity is not starved by the first.
    let mut other = Peer::with_token(&stack, "victim", "victim-token").await;
    other.ok(SUBSCRIBE, sub("v1", "events.p.1")).await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_topic_fans_out_to_at_most_the_cap() {
    let stack = Persist::start_with(LISTENERS, CAPS).await;
    let mut a = Peer::open(&stack.url).await;
    let mut v = Peer::with_token(&stack, "victim", "victim-token").await;
    let mut i = Peer::with_token(&stack, "intruder", "intruder-token").await;
    a.ok(SUBSCRIBE, sub("x", "events.orders")).await;
    v.ok(SUBSCRIBE, sub("x", "events.orders")).await;
    i.ok(SUBSCRIBE, sub("x", "events.orders")).await;
    let fourth = i.call(SUBSCRIBE, sub("y", "events.orders")).await;
    let (code, detail) = error(&fourth);
    assert_eq!(code, -32007, "{fourth}");
    assert!(detail.contains("of one topic"), "{detail}");
    // Other topics are not affected.
    i.ok(SUBSCRIBE, sub("y", "events.p.1")).await;
    // One leaves: room again.
    a.ok(UNSUBSCRIBE, json!({"subscription_id": "x"})).await;
    v.ok(SUBSCRIBE, sub("z", "events.orders")).await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_subscriptions_follow_the_topic_policy() {
    let narrow = r#"
[listeners.narrow]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/narrow"
allow_topics = ["events.p.>"]
deny_topics = ["events.p.secret"]
"#;
    let stack = Persist::start_with(narrow, "").await;
    let mut c = Peer::open(&stack.urls["narrow"]).await;
    c.ok(SUBSCRIBE, sub("ok", "events.p.1")).await;
    for (id, topic) in [("no-1", "events.orders"), ("no-2", "events.p.secret")] {
        let r = c.call(SUBSCRIBE, sub(id, topic)).await;
        assert_eq!(r["error"]["code"], -32001, "{topic}: {r}");
        assert_eq!(r["error"]["data"], "forbidden by policy", "{topic}: {r}");
    }
    let batch = json!({"subscriptions": [sub("b1", "events.p.2"), sub("b2", "events.orders")]});
    let r = c.call(SUBSCRIBE_BATCH, batch).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    // Nothing of the refused batch was created: b1 is new when asked alone.
    let b1 = c.ok(SUBSCRIBE, sub("b1", "events.p.2")).await;
    assert_eq!(b1["resumed_from_sequence"], 0);
    // The listener without allow_topics keeps its upstream's topics.
    let mut public = Peer::open(&stack.url).await;
    public.ok(SUBSCRIBE, sub("o", "events.orders")).await;
    stack.stop().await;
}
