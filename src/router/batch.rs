//! Client batches: a [`Batch`] splits a client batch into the items bound
//! for an upstream that accepts batches, grouped per upstream and sent to
//! it as one batch, and the others, which the router handles one by one,
//! concurrently; the replies come back in request order.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant as TokioInstant;

use crate::dialect::Item;
use crate::envelope::{Message, Method, Payload, WireId};
use crate::error::GatewayError;
use crate::upstream::Upstream;

/// One batch item bound for an upstream: (position, request id, method,
/// params).
type Call = (usize, Option<WireId>, Method, Option<Payload>);

/// A client batch, split: items as many as the client sent (the batch
/// size limit of the listener's codec bounds them).
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// Items for upstreams that accept batches, one group per upstream.
    groups: Vec<Group>,
    /// Items handled one by one: (position, item).
    single: Vec<(usize, Item)>,
}

/// The items of one batch bound for one upstream.
#[derive(Debug)]
pub(super) struct Group {
    upstream: Arc<Upstream>,
    calls: Vec<Call>,
}

// === impl Batch ===

impl Batch {
    /// Splits `items`: a request or notification whose method `target`
    /// routes (to an upstream that takes batches of it) joins that
    /// upstream's group; every other item is handled alone.
    pub(super) fn split(items: Vec<Item>, target: impl Fn(&str) -> Option<Arc<Upstream>>) -> Self {
        let mut batch = Batch::default();
        for (i, item) in items.into_iter().enumerate() {
            let up = match &item {
                Item::Valid(
                    Message::Request { method, .. } | Message::Notification { method, .. },
                ) => target(method),
                _ => None,
            };
            match (up, item) {
                (Some(up), Item::Valid(Message::Request { id, method, params })) => {
                    batch.push(up, (i, Some(id), method, params));
                }
                (Some(up), Item::Valid(Message::Notification { method, params })) => {
                    batch.push(up, (i, None, method, params));
                }
                (_, item) => batch.single.push((i, item)),
            }
        }
        batch
    }

    /// The groups, and the items handled one by one (with their
    /// positions).
    pub(super) fn into_parts(self) -> (Vec<Group>, Vec<(usize, Item)>) {
        (self.groups, self.single)
    }

    fn push(&mut self, up: Arc<Upstream>, call: Call) {
        match self
            .groups
            .iter_mut()
            .find(|g| Arc::ptr_eq(&g.upstream, &up))
        {
            Some(g) => g.calls.push(call),
            None => self.groups.push(Group {
                upstream: up,
                calls: vec![call],
            }),
        }
    }
}

// === impl Group ===

impl Group {
    /// Sends the group to its upstream as one batch, answered within
    /// `timeout`; each item's position and, for a request the upstream
    /// answered, the client's reply that `reply` makes of the answer.
    pub(super) async fn forward(
        self,
        timeout: Duration,
        reply: impl Fn(WireId, &Upstream, Result<Message, GatewayError>) -> Message,
    ) -> Vec<(usize, Option<Message>)> {
        let deadline = TokioInstant::now() + timeout;
        let wire: Vec<(&str, Option<&Payload>, bool)> = self
            .calls
            .iter()
            .map(|(_, id, m, p)| (m.as_str(), p.as_ref(), id.is_some()))
            .collect();
        let replies = self.upstream.call_batch(&wire, deadline).await;
        let up = &self.upstream;
        self.calls
            .into_iter()
            .zip(replies)
            .map(|((i, id, _, _), answer)| match (id, answer) {
                (Some(id), Some(answer)) => (i, Some(reply(id, up, answer))),
                _ => (i, None),
            })
            .collect()
    }
}
