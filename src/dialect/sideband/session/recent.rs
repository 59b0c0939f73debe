//! The Message frame ids a session saw last, to drop a repeated one
//! (sideband.md §10: a frameId seen in the last 1,024 frames).
//!
//! The ids sit in a ring, in arrival order; a hash table holds their
//! positions in it (two bytes each), found by the hash of the id there.
//! Forgetting the oldest id needs no search by key: its position is known.
//! For 1,024 ids that is 16 KiB of ring and about 6 KiB of table, touched
//! in few places per frame, against over 50 KiB for a set of ids and a
//! queue of them.

use foldhash::quality::RandomState;
use hashbrown::HashTable;
use std::hash::BuildHasher;

use crate::dialect::sideband::FrameId;

/// The last `window` distinct ids recorded, at most `u16::MAX + 1`.
#[derive(Debug)]
pub(super) struct RecentIds {
    window: usize,
    /// The ids, in arrival order until full; then `next` is the oldest,
    /// the one the next new id replaces.
    ring: Vec<FrameId>,
    next: usize,
    /// Positions in `ring`. Keyed by the peer's ids: foldhash, seeded per
    /// process, is fast and not predictable by the peer.
    positions: HashTable<u16>,
    hasher: RandomState,
}

impl RecentIds {
    /// An empty window of `window` ids; nothing is allocated until the
    /// first one.
    pub(super) fn new(window: usize) -> Self {
        RecentIds {
            window: window.clamp(1, usize::from(u16::MAX) + 1),
            ring: Vec::new(),
            next: 0,
            positions: HashTable::new(),
            hasher: RandomState::default(),
        }
    }

    /// Records `id`; false (and nothing recorded) when it is among the
    /// ids in the window.
    pub(super) fn insert(&mut self, id: FrameId) -> bool {
        let hash = self.hasher.hash_one(id);
        let ring = &self.ring;
        let seen = |&at: &u16| ring.get(usize::from(at)) == Some(&id);
        if self.positions.find(hash, seen).is_some() {
            return false;
        }
        let at = if self.ring.len() < self.window {
            self.ring.push(id);
            self.ring.len() - 1
        } else {
            let at = self.next;
            if let Some(oldest) = self.ring.get_mut(at) {
                let old_hash = self.hasher.hash_one(*oldest);
                let here = |&p: &u16| usize::from(p) == at;
                if let Ok(entry) = self.positions.find_entry(old_hash, here) {
                    entry.remove();
                }
                *oldest = id;
            }
            self.next = (at + 1) % self.window;
            at
        };
        let (ring, hasher) = (&self.ring, &self.hasher);
        let rehash =
            |&p: &u16| hasher.hash_one(ring.get(usize::from(p)).copied().unwrap_or_default());
        // `at` < window <= u16::MAX + 1.
        self.positions.insert_unique(hash, at as u16, rehash);
        true
    }

    /// How many ids are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.positions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::RecentIds;
    use crate::dialect::sideband::FrameId;

    fn id(n: u32) -> FrameId {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&n.to_le_bytes());
        id
    }

    /// An id is refused while it is among the last `window` ids, and taken
    /// again once `window` other ids came after it.
    #[test]
    fn an_id_is_a_duplicate_exactly_while_it_is_in_the_window() {
        for window in [1, 2, 3, 1024] {
            let mut recent = RecentIds::new(window);
            assert!(recent.insert(id(0)));
            assert!(!recent.insert(id(0)), "{window}: repeated at once");
            for n in 1..window as u32 {
                assert!(recent.insert(id(n)));
            }
            assert!(!recent.insert(id(0)), "{window}: still among the last");
            assert!(recent.insert(id(window as u32)));
            assert!(
                recent.insert(id(0)),
                "{window}: forgotten after {window} others"
            );
            assert_eq!(recent.len(), window);
        }
    }

    /// Many rounds through the ring keep exactly the last `window` ids,
    /// compared with the obvious model (a queue).
    #[test]
    fn many_rounds_keep_the_last_ids() {
        let window = 64;
        let mut recent = RecentIds::new(window);
        let mut model = std::collections::VecDeque::new();
        // Ids from a small space, so repeats happen inside and outside the
        // window.
        let mut x: u32 = 1;
        for _ in 0..20_000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let candidate = id((x >> 16) % 200);
            let fresh = !model.contains(&candidate);
            assert_eq!(recent.insert(candidate), fresh);
            if fresh {
                model.push_back(candidate);
                if model.len() > window {
                    model.pop_front();
                }
            }
            assert_eq!(recent.len(), model.len());
        }
    }
}
