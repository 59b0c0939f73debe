//! The subject index: a token trie from subscription patterns to
//! subscriber keys, as NATS' sublist.
//!
//! Matching a published topic walks at most the trie paths the topic can
//! take (its literal token, `*` and `>` at each level), so its cost depends
//! on the topic's length and on the subscriptions that match, never on the
//! number that do not: there is no scan of every pattern.
//!
//! Memory: one node per distinct token path of the patterns held (patterns
//! with a common prefix share its nodes), plus one set entry per (pattern,
//! key). A node is small: its literal children sit in a vector sorted by
//! token while they are few ([`FEW`]) and in a hash map of boxed nodes past
//! that, a token of up to 24 bytes is stored inline, and the key sets are
//! allocated only at nodes where a pattern ends. Removing the last key of a
//! path prunes its empty nodes, and a vector, map or set shrinks as it
//! empties, so memory returns when subscriptions go.
//!
//! [`cost`] is what one (pattern, key) pair may take, at most, in the
//! index and in the broker's list of a connection's patterns, counted as if
//! it shared no node; the broker bounds the sum of its pairs' costs per
//! connection, per client address and in total. The unit tests check the
//! bytes allocated against it.
//!
//! Patterns are expected valid ([`super::topic::validate_pattern`]): a `>`
//! token ends the pattern wherever it stands.

use std::collections::HashMap;
use std::hash::Hash;

use compact_str::CompactString;
use rustc_hash::FxHashSet;

use super::topic::{ONE, REST};

/// Bytes of index a pattern accounts for per byte of its text: the
/// connection's own copy of the pattern and the trie's copy of its tokens.
pub const COST_PER_BYTE: usize = 2;

/// Bytes of index a pattern accounts for per token: a trie node, its entry
/// in its parent (in a hash map at most 16/7 buckets per entry) and its
/// allocation.
pub const COST_PER_TOKEN: usize = 128;

/// Bytes of index a pattern accounts for once: its key in the set of the
/// node it ends at (and that node's sets, when it is the first), and its
/// entry in the connection's list of patterns.
pub const COST_PER_PATTERN: usize = 256;

/// Literal children a node keeps in a sorted vector; past this they move
/// to a hash map (and back once at most half of it are left).
pub const FEW: usize = 8;

/// The bytes of index `pattern` accounts for: `2 × bytes + 128 × tokens +
/// 256` (see [`COST_PER_BYTE`], [`COST_PER_TOKEN`], [`COST_PER_PATTERN`]).
/// An upper bound on what holding it takes, whatever else is held.
pub fn cost(pattern: &str) -> usize {
    let tokens = tokens(pattern);
    COST_PER_BYTE * pattern.len() + COST_PER_TOKEN * tokens + COST_PER_PATTERN
}

/// The number of tokens of `pattern` (wildcards included).
pub fn tokens(pattern: &str) -> usize {
    pattern.split('.').count()
}

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
    literal: Children<K>,
    /// The child for a `*` token.
    one: Option<Box<Node<K>>>,
    /// Keys of the patterns that end here, if any.
    keys: Option<Box<Keys<K>>>,
}

/// A node's literal children.
#[derive(Debug)]
enum Children<K> {
    /// At most [`FEW`], sorted by token, with no spare room.
    Few(Vec<(CompactString, Node<K>)>),
    /// More than [`FEW`] / 2. Boxed so that a node stays 40 bytes (a map
    /// is 48): most nodes have few children, and a few wide ones pay the
    /// extra allocation.
    #[allow(clippy::box_collection)]
    Many(Box<HashMap<CompactString, Box<Node<K>>>>),
}

/// The keys of the patterns ending at one node.
#[derive(Debug)]
struct Keys<K> {
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
        let mut rest = false;
        for token in pattern.split('.') {
            if token == REST {
                rest = true;
                break;
            }
            node = if token == ONE {
                node.one.get_or_insert_with(|| Box::new(Node::new()))
            } else {
                node.literal.child_or_insert(token)
            };
        }
        let keys = node.keys.get_or_insert_with(|| {
            Box::new(Keys {
                here: FxHashSet::default(),
                rest: FxHashSet::default(),
            })
        });
        let added = if rest {
            keys.rest.insert(key)
        } else {
            keys.here.insert(key)
        };
        if added {
            self.len += 1;
        }
        added
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
            literal: Children::Few(Vec::new()),
            one: None,
            keys: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.literal.is_empty() && self.one.is_none() && self.keys.is_none()
    }

    fn remove<'p>(&mut self, tokens: &mut impl Iterator<Item = &'p str>, key: K) -> bool {
        let Some(token) = tokens.next() else {
            return self.remove_key(key, false);
        };
        if token == REST {
            return self.remove_key(key, true);
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

    /// Removes `key` from the keys ending here (`rest`: those followed by
    /// `>`), letting the sets go once empty.
    fn remove_key(&mut self, key: K, rest: bool) -> bool {
        let Some(keys) = self.keys.as_mut() else {
            return false;
        };
        let set = if rest { &mut keys.rest } else { &mut keys.here };
        let removed = set.remove(&key);
        shrink_set(set);
        if keys.here.is_empty() && keys.rest.is_empty() {
            self.keys = None;
        }
        removed
    }

    fn collect(&self, tokens: &[&str], out: &mut Vec<K>) {
        let Some((first, rest)) = tokens.split_first() else {
            if let Some(keys) = &self.keys {
                out.extend(keys.here.iter().copied());
            }
            return;
        };
        // At least one token remains, so a `>` here matches.
        if let Some(keys) = &self.keys {
            out.extend(keys.rest.iter().copied());
        }
        if let Some(child) = self.literal.get(first) {
            child.collect(rest, out);
        }
        if let Some(child) = &self.one {
            child.collect(rest, out);
        }
    }

    fn any(&self, tokens: &[&str]) -> bool {
        let Some((first, rest)) = tokens.split_first() else {
            return self.keys.as_ref().is_some_and(|k| !k.here.is_empty());
        };
        self.keys.as_ref().is_some_and(|k| !k.rest.is_empty())
            || self.literal.get(first).is_some_and(|c| c.any(rest))
            || self.one.as_ref().is_some_and(|c| c.any(rest))
    }

    fn descendants(&self) -> usize {
        let literal: usize = self.literal.nodes().map(|c| 1 + c.descendants()).sum();
        literal + self.one.as_ref().map_or(0, |c| 1 + c.descendants())
    }
}

// === impl Children ===

impl<K: Copy + Ord + Hash> Children<K> {
    fn is_empty(&self) -> bool {
        match self {
            Children::Few(few) => few.is_empty(),
            Children::Many(many) => many.is_empty(),
        }
    }

    fn get(&self, token: &str) -> Option<&Node<K>> {
        match self {
            Children::Few(few) => few
                .binary_search_by(|(t, _)| t.as_str().cmp(token))
                .ok()
                .and_then(|i| few.get(i))
                .map(|(_, node)| node),
            Children::Many(many) => many.get(token).map(|node| &**node),
        }
    }

    fn get_mut(&mut self, token: &str) -> Option<&mut Node<K>> {
        match self {
            Children::Few(few) => few
                .binary_search_by(|(t, _)| t.as_str().cmp(token))
                .ok()
                .and_then(|i| few.get_mut(i))
                .map(|(_, node)| node),
            Children::Many(many) => many.get_mut(token).map(|node| &mut **node),
        }
    }

    /// The child for `token`, added (empty) if missing.
    fn child_or_insert(&mut self, token: &str) -> &mut Node<K> {
        if let Children::Few(few) = self {
            let missing = few
                .binary_search_by(|(t, _)| t.as_str().cmp(token))
                .is_err();
            if missing && few.len() >= FEW {
                let many = few.drain(..).map(|(t, node)| (t, Box::new(node))).collect();
                *self = Children::Many(Box::new(many));
            }
        }
        match self {
            Children::Few(few) => {
                let i = match few.binary_search_by(|(t, _)| t.as_str().cmp(token)) {
                    Ok(i) => i,
                    Err(i) => {
                        // Exactly one more: a vector of few children has
                        // no spare room.
                        few.reserve_exact(1);
                        few.insert(i, (CompactString::new(token), Node::new()));
                        i
                    }
                };
                &mut few[i].1
            }
            Children::Many(many) => many
                .entry(CompactString::new(token))
                .or_insert_with(|| Box::new(Node::new())),
        }
    }

    /// Removes the child for `token` (empty by now), shrinking what holds
    /// the children: a vector to its length, a map to at most twice its
    /// length, and back to a vector at [`FEW`] / 2.
    fn remove(&mut self, token: &str) {
        match self {
            Children::Few(few) => {
                if let Ok(i) = few.binary_search_by(|(t, _)| t.as_str().cmp(token)) {
                    few.remove(i);
                    few.shrink_to_fit();
                }
            }
            Children::Many(many) => {
                many.remove(token);
                if many.len() <= FEW / 2 {
                    let mut few: Vec<_> = many.drain().map(|(t, node)| (t, *node)).collect();
                    few.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                    few.shrink_to_fit();
                    *self = Children::Few(few);
                } else if many.capacity() > 2 * many.len() {
                    many.shrink_to_fit();
                }
            }
        }
    }

    fn nodes(&self) -> Box<dyn Iterator<Item = &Node<K>> + '_> {
        match self {
            Children::Few(few) => Box::new(few.iter().map(|(_, node)| node)),
            Children::Many(many) => Box::new(many.values().map(|node| &**node)),
        }
    }
}

/// Lets a set's room go once it is more than twice what it holds (so a
/// table holds at most 16/7 buckets per entry, as after it grows).
fn shrink_set<K: Hash + Eq>(set: &mut FxHashSet<K>) {
    if set.capacity() > 2 * set.len() {
        set.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests;
