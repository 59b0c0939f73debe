//! Map keys for duplicate detection: a key's identity in the CBOR data
//! model, and the keys one map has had so far.

use std::borrow::Cow;
use std::collections::HashSet;

use smallvec::SmallVec;

use super::{CborError, Reader, MAJOR_BYTES, MAJOR_NINT, MAJOR_SIMPLE, MAJOR_TEXT, MAJOR_UINT};

/// A map key's identity, for duplicate detection. Equal data-model values
/// compare equal whatever their encoding (shortest or not, definite or
/// chunked); containers and tags as keys compare by their raw bytes.
#[derive(PartialEq, Eq, Hash)]
pub(in crate::dialect::sideband) enum KeyId<'a> {
    Int(bool, u64),
    Bytes(Cow<'a, [u8]>),
    Text(Cow<'a, [u8]>),
    Float(u64),
    Simple(u64),
    Raw(&'a [u8]),
}

/// Keys seen so far in one map. Most maps are small: their keys are
/// compared one by one, with no hashing, and the first [`INLINE_KEYS`]
/// are held with no allocation; past [`FEW_KEYS`] they move to a (SipHash,
/// so flooding-resistant) hash set.
// Large on purpose: it lives on the stack while one map is read, and
// boxing the inline keys would bring back the allocation.
#[allow(clippy::large_enum_variant)]
pub(in crate::dialect::sideband) enum MapKeys<'a> {
    Few(SmallVec<[KeyId<'a>; INLINE_KEYS]>),
    Many(HashSet<KeyId<'a>>),
}

/// Keys held without an allocation: an envelope has three to five
/// members, and most payload objects few more.
const INLINE_KEYS: usize = 8;

/// Keys a map may have before duplicate checks switch to a hash set.
const FEW_KEYS: usize = 16;

// === impl MapKeys ===

impl<'a> MapKeys<'a> {
    /// No key seen yet.
    pub(in crate::dialect::sideband) fn new() -> Self {
        MapKeys::Few(SmallVec::new())
    }

    /// Adds a key; false when the map already had it.
    pub(in crate::dialect::sideband) fn insert(&mut self, key: KeyId<'a>) -> bool {
        match self {
            MapKeys::Few(keys) if keys.contains(&key) => false,
            MapKeys::Few(keys) if keys.len() < FEW_KEYS => {
                keys.push(key);
                true
            }
            MapKeys::Few(keys) => {
                let mut set: HashSet<KeyId<'a>> = keys.drain(..).collect();
                set.insert(key);
                *self = MapKeys::Many(set);
                true
            }
            MapKeys::Many(set) => set.insert(key),
        }
    }
}

/// The identity of a key item already read whole, its text checked to be
/// UTF-8 ([`Reader::skip`], or the transcoder's walk).
pub(super) fn key_id(raw: &[u8]) -> Result<KeyId<'_>, CborError> {
    let mut reader = Reader::new(raw);
    let head = reader.head()?;
    Ok(match head.major {
        MAJOR_UINT => KeyId::Int(false, head.arg),
        MAJOR_NINT => KeyId::Int(true, head.arg),
        MAJOR_BYTES => KeyId::Bytes(reader.string(head)?),
        // Checked to be UTF-8 by the read that produced `raw`.
        MAJOR_TEXT => KeyId::Text(reader.string_checked(head, false)?),
        MAJOR_SIMPLE => match head.float() {
            Some(f) => KeyId::Float(f.to_bits()),
            None => KeyId::Simple(head.arg),
        },
        _ => KeyId::Raw(raw),
    })
}
