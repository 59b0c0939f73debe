//! Client batches: items bound for an upstream that accepts batches go to
//! it as one batch; the others are handled one by one, concurrently; the
//! replies come back in request order.

use std::sync::Arc;

use futures_util::future::join_all;
use tokio::time::Instant as TokioInstant;

use super::{ClientLinks, Router, Starts};
use crate::dialect::Item;
use crate::envelope::{Message, Method, Payload, WireId};
use crate::upstream::Upstream;

/// Batch items bound for one upstream: (position, request id, method, params).
type Group = (
    Arc<Upstream>,
    Vec<(usize, Option<WireId>, Method, Option<Payload>)>,
);

fn push_group(
    groups: &mut Vec<Group>,
    up: Arc<Upstream>,
    call: (usize, Option<WireId>, Method, Option<Payload>),
) {
    match groups.iter_mut().find(|(u, _)| Arc::ptr_eq(u, &up)) {
        Some((_, calls)) => calls.push(call),
        None => groups.push((up, vec![call])),
    }
}

// === impl Router ===

impl Router {
    /// Handles the items of one client batch and returns their replies in
    /// request order. Items routed to an upstream that accepts batches go to
    /// it as one batch; all others are handled one by one, concurrently.
    /// Persistent subscriptions opened by its items deliver once `starts`
    /// is released (after the batch reply is queued).
    pub async fn handle_batch(
        &self,
        items: Vec<Item>,
        client: &ClientLinks,
        starts: &Starts,
    ) -> Vec<Message> {
        let mut grouped: Vec<Group> = Vec::new();
        let mut single = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let target = match &item {
                Item::Valid(
                    Message::Request { method, .. } | Message::Notification { method, .. },
                ) => self
                    .routed(method, client.client_name())
                    .filter(|u| u.takes_batches_of(method))
                    .cloned(),
                _ => None,
            };
            match (target, item) {
                (Some(up), Item::Valid(Message::Request { id, method, params })) => {
                    push_group(&mut grouped, up, (i, Some(id), method, params));
                }
                (Some(up), Item::Valid(Message::Notification { method, params })) => {
                    push_group(&mut grouped, up, (i, None, method, params));
                }
                (_, item) => single.push((i, item)),
            }
        }
        let singles =
            join_all(single.into_iter().map(|(i, item)| async move {
                vec![(i, self.handle(item, client, starts).await)]
            }));
        let groups = join_all(
            grouped
                .into_iter()
                .map(|(up, calls)| self.forward_batch(up, calls)),
        );
        let (singles, groups) = tokio::join!(singles, groups);
        let mut replies: Vec<(usize, Option<Message>)> =
            singles.into_iter().chain(groups).flatten().collect();
        replies.sort_by_key(|(i, _)| *i);
        replies.into_iter().filter_map(|(_, m)| m).collect()
    }

    async fn forward_batch(
        &self,
        upstream: Arc<Upstream>,
        calls: Vec<(usize, Option<WireId>, Method, Option<Payload>)>,
    ) -> Vec<(usize, Option<Message>)> {
        let deadline = TokioInstant::now() + self.cfg.request_timeout;
        let wire: Vec<(&str, Option<&Payload>, bool)> = calls
            .iter()
            .map(|(_, id, m, p)| (m.as_str(), p.as_ref(), id.is_some()))
            .collect();
        let replies = upstream.call_batch(&wire, deadline).await;
        calls
            .into_iter()
            .zip(replies)
            .map(|((i, id, _, _), reply)| {
                let msg = match (id, reply) {
                    (Some(id), Some(reply)) => Some(self.reply_for(id, &upstream, reply)),
                    _ => None,
                };
                (i, msg)
            })
            .collect()
    }
}
