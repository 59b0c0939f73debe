//! Which topics a client may subscribe to ([`TopicPolicy`]: allow and deny
//! lists of NATS-style patterns), and the exact decision of whether a
//! subscription pattern stays inside them.
//!
//! A pattern `p` is admitted when **every** concrete topic it can match is
//! allowed: matched by some allow pattern and by no deny pattern. So
//! `orders.>` is refused where only `orders.eu.>` is allowed (it matches
//! `orders.us`), and `a.>` is admitted where `a.*` and `a.*.>` are allowed
//! together (neither alone covers it, their union does).
//!
//! # How containment is decided
//!
//! - **Deny:** `p` is refused when it *overlaps* a deny pattern, i.e. some
//!   topic matches both. Two patterns overlap exactly when, token by token,
//!   each pair is equal or has a `*`, and either both end together or one
//!   reaches `>` while the other still has a token ([`overlaps`]).
//! - **Allow:** `p ⊆ ∪ allow` is decided by searching for a *witness*, a
//!   topic that `p` matches and no allow pattern does ([`covered`]). The
//!   search walks `p` token by token, carrying the allow patterns still
//!   alive and where each is. At a wildcard of `p` the next token need only
//!   be tried as each literal some alive allow pattern expects there, plus
//!   one fresh token equal to none of them: every other token behaves
//!   exactly like the fresh one. An allow pattern reaching `>` with a token
//!   to consume covers every continuation (that branch has no witness); a
//!   point where the topic may end is covered only if an alive allow
//!   pattern ends there too. After `p`'s own `>`, the topic may go on for
//!   any number of tokens; that tail is walked the same way until every
//!   allow pattern is exhausted or covers it, which bounds the depth by the
//!   longest allow pattern. States already seen are not walked again.
//!
//! The search is exact, not a heuristic; it is tested against a naive
//! reference that enumerates every topic over the patterns' literals and a
//! fresh token, up to two tokens longer than the longest pattern
//! (`tests` below, table and property test). Its cost is bounded by
//! [`MAX_STEPS`]; past it (never reached by lists of the configured sizes
//! in practice) the pattern is refused: a policy fails closed.

use std::collections::HashSet;

use super::topic::{ONE, REST};

/// Search steps one decision may take before it refuses (fails closed).
pub const MAX_STEPS: usize = 100_000;

/// The topics one client may subscribe to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicPolicy {
    /// Allowed patterns; empty allows nothing.
    allow: Vec<Vec<String>>,
    /// Denied patterns; they win.
    deny: Vec<Vec<String>>,
}

// === impl TopicPolicy ===

impl TopicPolicy {
    /// A policy allowing `allow` but not `deny` (valid patterns; see
    /// [`super::topic::validate_pattern`]).
    pub fn new<A, D>(allow: A, deny: D) -> Self
    where
        A: IntoIterator,
        A::Item: AsRef<str>,
        D: IntoIterator,
        D::Item: AsRef<str>,
    {
        TopicPolicy {
            allow: allow.into_iter().map(|p| tokens(p.as_ref())).collect(),
            deny: deny.into_iter().map(|p| tokens(p.as_ref())).collect(),
        }
    }

    /// Is every topic `pattern` (a valid pattern) can match allowed?
    pub fn admits(&self, pattern: &str) -> bool {
        let p = tokens(pattern);
        if self.deny.iter().any(|d| overlaps(&p, d)) {
            return false;
        }
        covered(&p, &self.allow).unwrap_or(false)
    }
}

fn tokens(pattern: &str) -> Vec<String> {
    pattern.split('.').map(str::to_owned).collect()
}

/// Does some topic match both `a` and `b`?
pub fn overlaps(a: &[String], b: &[String]) -> bool {
    let mut i = 0;
    loop {
        match (a.get(i).map(String::as_str), b.get(i).map(String::as_str)) {
            (None, None) => return true,
            // `>` needs one token; the other has one here (or is `>`).
            (Some(REST), Some(_)) | (Some(_), Some(REST)) => return true,
            (Some(x), Some(y)) if x == y || x == ONE || y == ONE => i += 1,
            _ => return false,
        }
    }
}

/// Does the union of `allow` match every topic `p` matches? `None` when
/// the search ran past [`MAX_STEPS`].
pub fn covered(p: &[String], allow: &[Vec<String>]) -> Option<bool> {
    let alive: Vec<(usize, usize)> = (0..allow.len()).map(|a| (a, 0)).collect();
    let mut search = Search {
        allow,
        seen: HashSet::new(),
        steps: 0,
    };
    search.walk(p, 0, false, alive).map(|witness| !witness)
}

/// A point of the search: position in `p`, inside `p`'s `>` tail, and the
/// alive allow patterns with their positions.
type State = (usize, bool, Vec<(usize, usize)>);

/// The witness search of [`covered`].
struct Search<'a> {
    allow: &'a [Vec<String>],
    /// `(position in p, in p's tail after >, alive)` already walked
    /// without a witness.
    seen: HashSet<State>,
    steps: usize,
}

/// What the next token of the topic may be.
enum Next<'t> {
    /// Exactly this literal.
    Literal(&'t str),
    /// Any token.
    Any,
}

impl Search<'_> {
    /// Is there a topic, continuing from `p[i..]` (or inside `p`'s `>`
    /// tail when `tail`), that `p` matches and no alive allow pattern
    /// does? `None` past the step budget.
    fn walk(
        &mut self,
        p: &[String],
        i: usize,
        tail: bool,
        alive: Vec<(usize, usize)>,
    ) -> Option<bool> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return None;
        }
        if alive.is_empty() {
            // `p` still has a topic to match (or is in its tail): nothing
            // covers it.
            return Some(true);
        }
        if !self.seen.insert((i, tail, alive.clone())) {
            return Some(false);
        }
        let next = if tail {
            Next::Any
        } else {
            match p.get(i).map(String::as_str) {
                Some(ONE) | Some(REST) => Next::Any,
                Some(lit) => Next::Literal(lit),
                // `p` has ended: handled by the caller.
                None => return Some(false),
            }
        };
        let enters_tail = tail || p.get(i).map(String::as_str) == Some(REST);
        for token in self.candidates(&next, &alive) {
            let Some(after) = self.advance(&alive, token.as_deref()) else {
                // An allow pattern's `>` took this token: covered.
                continue;
            };
            let (ni, ntail) = if enters_tail {
                (i, true)
            } else {
                (i + 1, false)
            };
            // May the topic end here? Then some allow pattern must end too.
            let may_end = enters_tail || ni == p.len();
            if may_end && !after.iter().any(|&(a, j)| j == self.allow[a].len()) {
                return Some(true);
            }
            // May it go on? (Not when `p` has ended.)
            let goes_on = enters_tail || ni < p.len();
            if goes_on {
                let alive_on: Vec<(usize, usize)> = after
                    .into_iter()
                    .filter(|&(a, j)| j < self.allow[a].len())
                    .collect();
                if self.walk(p, ni, ntail, alive_on)? {
                    return Some(true);
                }
            }
        }
        Some(false)
    }

    /// The tokens worth trying next: the literal `p` needs, or each
    /// literal an alive allow pattern expects plus one fresh token
    /// (`None`), which stands for every other.
    fn candidates(&self, next: &Next<'_>, alive: &[(usize, usize)]) -> Vec<Option<String>> {
        match next {
            Next::Literal(lit) => vec![Some((*lit).to_owned())],
            Next::Any => {
                let mut out: Vec<Option<String>> = vec![None];
                for &(a, j) in alive {
                    let t = &self.allow[a][j];
                    if t != ONE && t != REST && !out.iter().any(|o| o.as_ref() == Some(t)) {
                        out.push(Some(t.clone()));
                    }
                }
                out
            }
        }
    }

    /// The alive allow patterns after one more token (`None`: a fresh
    /// token); `None` when one of them is at `>` (it covers the rest).
    fn advance(
        &self,
        alive: &[(usize, usize)],
        token: Option<&str>,
    ) -> Option<Vec<(usize, usize)>> {
        let mut out = Vec::with_capacity(alive.len());
        for &(a, j) in alive {
            match self.allow[a][j].as_str() {
                REST => return None,
                ONE => out.push((a, j + 1)),
                lit if Some(lit) == token => out.push((a, j + 1)),
                _ => {}
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests;
