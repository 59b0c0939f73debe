//! [`CidMap`]: the random correlation ids (cids) switchyard puts on the
//! Sideband requests it sends, each standing for one of its integer ids
//! (an upstream link's gateway id, or a client push's number).
//!
//! Both directions are kept so a reply's cid finds its id, and an
//! abandoned id (timeout, cancel) forgets its cid without a scan. Bounded
//! by its owner: one entry per pending call, and the owner's pending cap.

use std::collections::HashMap;

/// cid ⇄ integer id, for the calls still pending.
#[derive(Debug, Default)]
pub struct CidMap {
    by_cid: HashMap<[u8; 16], u64>,
    by_id: HashMap<u64, [u8; 16]>,
}

// === impl CidMap ===

impl CidMap {
    /// A fresh random cid for `id`, remembered until taken or forgotten.
    pub fn issue(&mut self, id: u64) -> [u8; 16] {
        let cid: [u8; 16] = rand::random();
        self.by_cid.insert(cid, id);
        if let Some(old) = self.by_id.insert(id, cid) {
            self.by_cid.remove(&old);
        }
        cid
    }

    /// The id a reply's `cid` stands for; forgets both.
    pub fn take(&mut self, cid: &[u8; 16]) -> Option<u64> {
        let id = self.by_cid.remove(cid)?;
        self.by_id.remove(&id);
        Some(id)
    }

    /// Forgets the cid of an abandoned `id`.
    pub fn forget(&mut self, id: u64) {
        if let Some(cid) = self.by_id.remove(&id) {
            self.by_cid.remove(&cid);
        }
    }

    /// How many ids are mapped.
    pub fn len(&self) -> usize {
        self.by_cid.len()
    }

    /// Whether no id is mapped.
    pub fn is_empty(&self) -> bool {
        self.by_cid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cid_is_taken_once() {
        let mut map = CidMap::default();
        let a = map.issue(1);
        let b = map.issue(2);
        assert_ne!(a, b);
        assert_eq!(map.take(&a), Some(1));
        assert_eq!(map.take(&a), None, "a reply is matched once");
        assert_eq!(map.len(), 1);
        map.forget(2);
        assert_eq!(map.take(&b), None, "forgotten with its id");
        assert!(map.is_empty());
    }

    #[test]
    fn reissuing_an_id_forgets_its_old_cid() {
        let mut map = CidMap::default();
        let old = map.issue(7);
        let new = map.issue(7);
        assert_eq!(map.take(&old), None);
        assert_eq!(map.take(&new), Some(7));
        assert!(map.is_empty());
    }
}
