//! Per-container field ownership while merging plugin replies: the first
//! plugin to set a field owns it, and a second plugin setting the same field
//! (or the same entry of a compound field) is a conflict. The state is kept
//! in NRI's own wire type, [`api::OwningPlugins`], because validator plugins
//! receive it verbatim in ValidateContainerAdjustment.

use crate::api::{self, Field};

/// Two plugins claimed the same field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugins \"{plugin}\" and \"{other}\" both tried to set {field}{}", key_suffix(.key))]
pub struct Conflict {
    /// The plugin whose claim was refused.
    pub plugin: String,
    /// The plugin that had claimed the field before.
    pub other: String,
    /// The field, as NRI names it (e.g. `Env`, `MemLimit`).
    pub field: String,
    /// The entry of a compound field (env name, mount destination...).
    pub key: Option<String>,
}

fn key_suffix(key: &Option<String>) -> String {
    key.as_ref().map(|k| format!(" {k}")).unwrap_or_default()
}

/// The prefix NRI uses to mark a key (or an owner) as removed.
pub const REMOVAL_MARKER: char = '-';

/// Splits a possibly removal-marked key: `("key", true)` for `-key`.
pub fn is_marked_for_removal(key: &str) -> (&str, bool) {
    match key.strip_prefix(REMOVAL_MARKER) {
        Some(rest) => (rest, true),
        None => (key, false),
    }
}

/// `key` with the removal marker.
pub fn mark_for_removal(key: &str) -> String {
    format!("{REMOVAL_MARKER}{key}")
}

fn field_name(field: Field) -> String {
    format!("{field:?}")
}

/// Ownership of every adjusted field of every container in one merge.
#[derive(Debug, Default, Clone)]
pub struct Owners(pub api::OwningPlugins);

impl Owners {
    fn of(&mut self, id: &str) -> &mut api::FieldOwners {
        self.0.owners.entry(id.to_string()).or_default()
    }

    /// Claims a simple field of container `id` for `plugin`.
    pub fn claim(&mut self, id: &str, field: Field, plugin: &str) -> Result<(), Conflict> {
        let owners = self.of(id);
        let key = field as i32;
        if let Some(other) = owners.simple.get(&key) {
            check(other, plugin, field, None)?;
        }
        owners.simple.insert(key, plugin.to_string());
        Ok(())
    }

    /// Claims entry `entry` of a compound field of container `id`.
    pub fn claim_entry(
        &mut self,
        id: &str,
        field: Field,
        entry: &str,
        plugin: &str,
    ) -> Result<(), Conflict> {
        let map = self.of(id).compound.entry(field as i32).or_default();
        if let Some(other) = map.owners.get(entry) {
            check(other, plugin, field, Some(entry))?;
        }
        map.owners.insert(entry.to_string(), plugin.to_string());
        Ok(())
    }

    /// Records that `plugin` removed entry `entry`: a later claim by another
    /// plugin conflicts with the remover.
    pub fn clear_entry(&mut self, id: &str, field: Field, entry: &str, plugin: &str) {
        let map = self.of(id).compound.entry(field as i32).or_default();
        map.owners
            .insert(entry.to_string(), mark_for_removal(plugin));
    }

    /// Records that `plugin` cleared a simple field.
    pub fn clear(&mut self, id: &str, field: Field, plugin: &str) {
        self.of(id)
            .simple
            .insert(field as i32, mark_for_removal(plugin));
    }

    /// OCI hooks accumulate instead of conflicting: the owner is the
    /// comma-separated list of every plugin that injected hooks.
    pub fn accumulate(&mut self, id: &str, field: Field, plugin: &str) {
        let owners = self.of(id);
        let key = field as i32;
        let value = match owners.simple.get(&key) {
            Some(old) => format!("{old},{plugin}"),
            None => plugin.to_string(),
        };
        owners.simple.insert(key, value);
    }

    /// The owner of a simple field, if claimed.
    pub fn owner(&self, id: &str, field: Field) -> Option<&str> {
        self.0
            .owners
            .get(id)
            .and_then(|o| o.simple.get(&(field as i32)))
            .map(String::as_str)
    }

    /// The owners of a compound field's entries, if any was claimed.
    pub fn entries(&self, id: &str, field: Field) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .0
            .owners
            .get(id)
            .and_then(|o| o.compound.get(&(field as i32)))
            .map(|c| c.owners.clone().into_iter().collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

fn check(other: &str, plugin: &str, field: Field, key: Option<&str>) -> Result<(), Conflict> {
    let (other, cleared) = is_marked_for_removal(other);
    if cleared && other == plugin {
        return Ok(());
    }
    Err(Conflict {
        plugin: plugin.to_string(),
        other: other.to_string(),
        field: field_name(field),
        key: key.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_claim_conflicts_naming_both() {
        let mut o = Owners::default();
        o.claim("c", Field::MemLimit, "10-a").unwrap();
        let e = o.claim("c", Field::MemLimit, "20-b").unwrap_err();
        assert_eq!(
            e.to_string(),
            "plugins \"20-b\" and \"10-a\" both tried to set MemLimit"
        );
        // Same plugin twice is a conflict too, as in NRI.
        assert!(o.claim("c", Field::MemLimit, "10-a").is_err());
        // Other containers are independent.
        o.claim("d", Field::MemLimit, "20-b").unwrap();
    }

    #[test]
    fn entry_claims_and_clears() {
        let mut o = Owners::default();
        o.claim_entry("c", Field::Env, "FOO", "10-a").unwrap();
        o.claim_entry("c", Field::Env, "BAR", "20-b").unwrap();
        let e = o.claim_entry("c", Field::Env, "FOO", "20-b").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("FOO"));
        assert!(e.to_string().contains("Env FOO"));
        o.clear_entry("c", Field::Env, "BAR", "20-b");
        o.claim_entry("c", Field::Env, "BAR", "20-b").unwrap();
        o.clear_entry("c", Field::Env, "BAZ", "20-b");
        let e = o.claim_entry("c", Field::Env, "BAZ", "30-c").unwrap_err();
        assert_eq!(e.other, "20-b");
    }

    #[test]
    fn hooks_accumulate() {
        let mut o = Owners::default();
        o.accumulate("c", Field::OciHooks, "10-a");
        o.accumulate("c", Field::OciHooks, "20-b");
        assert_eq!(o.owner("c", Field::OciHooks), Some("10-a,20-b"));
    }

    #[test]
    fn markers() {
        assert_eq!(is_marked_for_removal("-x"), ("x", true));
        assert_eq!(is_marked_for_removal("x"), ("x", false));
        assert_eq!(is_marked_for_removal(""), ("", false));
        assert_eq!(mark_for_removal("x"), "-x");
    }
}
