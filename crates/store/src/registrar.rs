//! Reserves names (a pod's or container's full name) so two requests cannot
//! create the same one.

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::sync::Mutex;

/// The name is taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("name {name:?} is reserved for {key:?}")]
pub struct Reserved {
    pub name: String,
    pub key: String,
}

/// Name → key (the id that holds it).
#[derive(Debug, Default)]
pub struct Registrar {
    names: Mutex<HashMap<String, String>>,
}

impl Registrar {
    /// Reserves `name` for `key`. Reserving it again for the same key is fine.
    pub fn reserve(&self, name: &str, key: &str) -> Result<(), Reserved> {
        let mut names = self.names.lock_unpoisoned();
        match names.get(name) {
            Some(holder) if holder == key => Ok(()),
            Some(holder) => Err(Reserved {
                name: name.to_string(),
                key: holder.clone(),
            }),
            None => {
                names.insert(name.to_string(), key.to_string());
                Ok(())
            }
        }
    }

    /// Releases `name` (no matter who holds it).
    pub fn release(&self, name: &str) {
        self.names.lock_unpoisoned().remove(name);
    }

    /// Releases `name` if `key` holds it (an undo must not free a name
    /// someone else has taken since).
    pub fn release_if(&self, name: &str, key: &str) {
        let mut names = self.names.lock_unpoisoned();
        if names.get(name).is_some_and(|holder| holder == key) {
            names.remove(name);
        }
    }

    /// The key holding `name`.
    pub fn holder(&self, name: &str) -> Option<String> {
        self.names.lock_unpoisoned().get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_if_frees_only_its_own_holder() {
        let r = Registrar::default();
        r.reserve("a", "k1").unwrap();
        r.release_if("a", "k2");
        assert_eq!(r.holder("a").as_deref(), Some("k1"));
        r.release_if("a", "k1");
        assert_eq!(r.holder("a"), None);
    }

    #[test]
    fn reserve_release() {
        let r = Registrar::default();
        r.reserve("pod_a", "id1").unwrap();
        r.reserve("pod_a", "id1").unwrap();
        let err = r.reserve("pod_a", "id2").unwrap_err();
        assert_eq!(err.key, "id1");
        assert_eq!(r.holder("pod_a").as_deref(), Some("id1"));
        r.release("pod_a");
        r.reserve("pod_a", "id2").unwrap();
    }
}
