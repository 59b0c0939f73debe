//! [`RouterSettings`]: what the router takes from its listener's
//! configuration.
//!
//! The router is given a small copy of these few values rather than a
//! shared `Arc<ListenerConfig>`, so that the type says what a request's
//! trip depends on: the listener's name (metric labels, logs), its
//! dialect (error replies, spans), the request timeout, the `ping`
//! notification switch and the method policy. Everything else in the
//! listener's configuration (message and batch sizes, in-flight and
//! outbox caps, timers, connection caps, rate limits, the upgrade checks,
//! the Sideband settings) belongs to the transport's
//! `transport::Listener`, and the router cannot reach it. The copy is
//! made once per configuration generation, next to the route table.

use std::time::Duration;

use crate::config::ListenerConfig;
use crate::dialect::Dialect;
use crate::limits::policy::MethodPolicy;
use crate::pubsub::topic_policy::TopicPolicy;

/// The listener settings a router applies to each request. The four
/// plain values are open to the router's files (read on every request);
/// the policies are reached through [`RouterSettings::methods_of`] and
/// [`RouterSettings::topics_of`].
#[derive(Debug, Clone)]
pub struct RouterSettings {
    /// The listener's name: the `listener` label and log field.
    pub(super) name: String,
    /// The listener's dialect: replies and errors are rendered in it.
    pub(super) dialect: Dialect,
    /// How long a request may wait for its upstream's reply.
    pub(super) request_timeout: Duration,
    /// Answer a `ping` notification with a `pong` (JSON-RPC dialects).
    pub(super) answer_ping_notification: bool,
    /// Which methods clients may call (`allow_methods`, `deny_methods`),
    /// applied before routing: the unnamed client's.
    methods: MethodPolicy,
    /// Each named client's method policy.
    clients: Vec<(std::sync::Arc<str>, MethodPolicy)>,
    /// Which topics the unnamed client may subscribe to (see
    /// [`RouterSettings::with_default_topics`]).
    topics: TopicPolicy,
    /// Each named client's topic policy.
    client_topics: Vec<(std::sync::Arc<str>, TopicPolicy)>,
    /// The configured topic lists, kept to build the policies above once
    /// the default (the routed upstreams' topics) is known.
    topic_lists: TopicLists,
}

/// A client's name and its configured `allow_topics` and `deny_topics`.
type ClientTopics = (
    std::sync::Arc<str>,
    Option<Vec<String>>,
    Option<Vec<String>>,
);

/// The `allow_topics` / `deny_topics` of the listener and of each client,
/// as configured (`None`: inherited).
#[derive(Debug, Clone, Default)]
struct TopicLists {
    allow: Option<Vec<String>>,
    deny: Vec<String>,
    clients: Vec<ClientTopics>,
}

// === impl RouterSettings ===

impl RouterSettings {
    /// The router's share of listener `cfg`.
    pub fn of(cfg: &ListenerConfig) -> Self {
        RouterSettings {
            name: cfg.name.clone(),
            dialect: cfg.dialect,
            request_timeout: cfg.request_timeout,
            answer_ping_notification: cfg.answer_ping_notification,
            methods: cfg.protection.methods.clone(),
            clients: cfg
                .protection
                .clients
                .iter()
                .map(|c| (c.name.clone(), c.methods.clone()))
                .collect(),
            topics: TopicPolicy::default(),
            client_topics: Vec::new(),
            topic_lists: TopicLists {
                allow: cfg.protection.allow_topics.clone(),
                deny: cfg.protection.deny_topics.clone(),
                clients: cfg
                    .protection
                    .clients
                    .iter()
                    .map(|c| {
                        (
                            c.name.clone(),
                            c.allow_topics.clone(),
                            c.deny_topics.clone(),
                        )
                    })
                    .collect(),
            },
        }
    }

    /// Builds the topic policies, with `default_allow` (the topics of the
    /// upstreams the listener routes to) where the listener sets no
    /// `allow_topics`.
    pub fn with_default_topics(mut self, default_allow: &[String]) -> Self {
        let lists = &self.topic_lists;
        let allow = lists.allow.as_deref().unwrap_or(default_allow);
        self.topics = TopicPolicy::new(allow, &lists.deny);
        self.client_topics = lists
            .clients
            .iter()
            .map(|(name, a, d)| {
                let a = a.as_deref().unwrap_or(allow);
                let d = d.as_deref().unwrap_or(&lists.deny);
                (name.clone(), TopicPolicy::new(a, d))
            })
            .collect();
        self
    }

    /// The topic policy of named client `who` (`None`: the unnamed
    /// client); `None` when this configuration has no such client.
    pub fn topics_of(&self, who: Option<&str>) -> Option<&TopicPolicy> {
        match who {
            None => Some(&self.topics),
            Some(name) => self
                .client_topics
                .iter()
                .find(|(n, _)| &**n == name)
                .map(|(_, t)| t),
        }
    }

    /// The method policy of named client `who` (`None`: the unnamed
    /// client); `None` when this configuration has no such client (it was
    /// removed by a reload: it may call nothing).
    pub fn methods_of(&self, who: Option<&str>) -> Option<&MethodPolicy> {
        match who {
            None => Some(&self.methods),
            Some(name) => self
                .clients
                .iter()
                .find(|(n, _)| &**n == name)
                .map(|(_, m)| m),
        }
    }
}
