//! The subject index: a token trie from subscription patterns to
//! subscriber keys, as NATS' sublist.
//!
//! Matching a published topic walks at most the trie paths the topic can
//! take (its literal token, `*` and `>` at each level), so its cost depends
//! on the topic's length and on the subscriptions that match, never on the
//! number that do not: there is no scan of every pattern.
//!
//! Memory: one node per distinct token path of the patterns held, plus one
//! set entry per (pattern, key). Removing the last key of a path prunes its
//! empty nodes, so memory returns when subscriptions go. The index holds
//! what the broker puts in it; the broker bounds that (at most `max`
//! patterns of at most 256 bytes per connection).
//!
//! Patterns are expected valid ([`super::topic::validate_pattern`]): a `>`
//! token ends the pattern wherever it stands.

use std::collections::HashMap;
use std::hash::Hash;

use rustc_hash::FxHashSet;

use super::topic::{ONE, REST};

/// Patterns → keys. `K` is a subscriber key the owner issues (so hashed
/// with FxHash); tokens come from clients and use the default SipHash.
#[derive(Debug)]
pub struct Index<K> {
    root: Node<K>,
    /// The number of (pattern, key) pairs held.
    len: usize,
}

#[derive(Debug)]
struct Node<K> {
    /// Children by literal token.
    literal: HashMap<Box<str>, Node<K>>,
    /// The child for a `*` token.
    one: Option<Box<Node<K>>>,
    /// Keys whose pattern ends at this node.
    here: FxHashSet<K>,
    /// Keys whose pattern is this node's path followed by `>`.
    rest: FxHashSet<K>,
}

// === impl Index ===

impl<K: Copy + Ord + Hash> Index<K> {
    /// An empty index.
    pub fn new() -> Self {
        Index {
            root: Node::new(),
            len: 0,
        }
    }

    /// Adds `key` under `pattern`; false if it was already there.
    pub fn insert(&mut self, pattern: &str, key: K) -> bool {
        let mut node = &mut self.root;
        for token in pattern.split('.') {
            if token == REST {
                let added = node.rest.insert(key);
                return self.count(added);
            }
            node = if token == ONE {
                node.one.get_or_insert_with(|| Box::new(Node::new()))
            } else {
                node.literal
                    .entry(Box::from(token))
                    .or_insert_with(Node::new)
            };
        }
        let added = node.here.insert(key);
        self.count(added)
    }

    /// Removes `key` from `pattern`, pruning nodes left empty; false if it
    /// was not there.
    pub fn remove(&mut self, pattern: &str, key: K) -> bool {
        let removed = self.root.remove(&mut pattern.split('.'), key);
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// Fills `out` (cleared first) with every key having at least one
    /// pattern that matches the concrete `topic`, each key once, in
    /// ascending order.
    pub fn matches(&self, topic: &str, out: &mut Vec<K>) {
        out.clear();
        let tokens: Vec<&str> = topic.split('.').collect();
        self.root.collect(&tokens, out);
        // A key with several matching patterns was collected once per
        // pattern: delivery is once per connection (§7.2).
        out.sort_unstable();
        out.dedup();
    }

    /// Does any pattern match the concrete `topic`? Stops at the first.
    pub fn has_match(&self, topic: &str) -> bool {
        let tokens: Vec<&str> = topic.split('.').collect();
        self.root.any(&tokens)
    }

    /// The number of (pattern, key) pairs held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no pattern is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of trie nodes below the root (memory accounting, tests).
    pub fn nodes(&self) -> usize {
        self.root.descendants()
    }

    fn count(&mut self, added: bool) -> bool {
        if added {
            self.len += 1;
        }
        added
    }
}

impl<K: Copy + Ord + Hash> Default for Index<K> {
    fn default() -> Self {
        Index::new()
    }
}

// === impl Node ===

impl<K: Copy + Ord + Hash> Node<K> {
    fn new() -> Self {
        Node {
            literal: HashMap::new(),
            one: None,
            here: FxHashSet::default(),
            rest: FxHashSet::default(),
        }
    }

    fn is_empty(&self) -> bool {
        self.literal.is_empty()
            && self.one.is_none()
            && self.here.is_empty()
            && self.rest.is_empty()
    }

    fn remove<'p>(&mut self, tokens: &mut impl Iterator<Item = &'p str>, key: K) -> bool {
        let Some(token) = tokens.next() else {
            return self.here.remove(&key);
        };
        if token == REST {
            return self.rest.remove(&key);
        }
        if token == ONE {
            let Some(child) = self.one.as_mut() else {
                return false;
            };
            let removed = child.remove(tokens, key);
            if child.is_empty() {
                self.one = None;
            }
            return removed;
        }
        let Some(child) = self.literal.get_mut(token) else {
            return false;
        };
        let removed = child.remove(tokens, key);
        if child.is_empty() {
            self.literal.remove(token);
        }
        removed
    }

    fn collect(&self, tokens: &[&str], out: &mut Vec<K>) {
        let Some((first, rest)) = tokens.split_first() else {
            out.extend(self.here.iter().copied());
            return;
        };
        // At least one token remains, so a `>` here matches.
        out.extend(self.rest.iter().copied());
        if let Some(child) = self.literal.get(*first) {
            child.collect(rest, out);
        }
        if let Some(child) = &self.one {
            child.collect(rest, out);
        }
    }

    fn any(&self, tokens: &[&str]) -> bool {
        let Some((first, rest)) = tokens.split_first() else {
            return !self.here.is_empty();
        };
        !self.rest.is_empty()
            || self.literal.get(*first).is_some_and(|c| c.any(rest))
            || self.one.as_ref().is_some_and(|c| c.any(rest))
    }

    fn descendants(&self) -> usize {
        let literal: usize = self.literal.values().map(|c| 1 + c.descendants()).sum();
        literal + self.one.as_ref().map_or(0, |c| 1 + c.descendants())
    }
}

#[cfg(test)]
mod tests;
