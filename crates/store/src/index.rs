//! Finds a full id from a unique prefix, as `crictl` users type them.

use berth_lock::RwLockExt;
use std::collections::BTreeSet;
use std::sync::RwLock;

/// Why a prefix did not lead to one id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("no id matches {0:?}")]
    NotFound(String),
    #[error("id prefix {0:?} matches more than one id")]
    Ambiguous(String),
    #[error("empty id")]
    Empty,
}

/// A sorted set of ids, searchable by prefix.
#[derive(Debug, Default)]
pub struct IdIndex {
    ids: RwLock<BTreeSet<String>>,
}

impl IdIndex {
    pub fn add(&self, id: &str) {
        self.ids.write_unpoisoned().insert(id.to_string());
    }

    pub fn remove(&self, id: &str) {
        self.ids.write_unpoisoned().remove(id);
    }

    /// The one id that equals or starts with `prefix`.
    pub fn get(&self, prefix: &str) -> Result<String, LookupError> {
        if prefix.is_empty() {
            return Err(LookupError::Empty);
        }
        let ids = self.ids.read_unpoisoned();
        if ids.contains(prefix) {
            return Ok(prefix.to_string());
        }
        let mut matches = ids
            .range(prefix.to_string()..)
            .take_while(|id| id.starts_with(prefix));
        match (matches.next(), matches.next()) {
            (Some(id), None) => Ok(id.clone()),
            (Some(_), Some(_)) => Err(LookupError::Ambiguous(prefix.to_string())),
            (None, _) => Err(LookupError::NotFound(prefix.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let idx = IdIndex::default();
        idx.add("abc123");
        idx.add("abd456");
        idx.add("ab");
        assert_eq!(idx.get("abc").unwrap(), "abc123");
        assert_eq!(idx.get("ab").unwrap(), "ab");
        assert_eq!(idx.get("abd456").unwrap(), "abd456");
        assert_eq!(idx.get("a"), Err(LookupError::Ambiguous("a".into())));
        assert_eq!(idx.get("x"), Err(LookupError::NotFound("x".into())));
        assert_eq!(idx.get(""), Err(LookupError::Empty));
        idx.remove("abc123");
        assert_eq!(idx.get("abc"), Err(LookupError::NotFound("abc".into())));
    }
}
