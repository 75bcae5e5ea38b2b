//! The AWS tag keys the operator reads and writes.
//!
//! Keys are `<prefix><name>` with the configurable prefix (default `resource-booking/`, as the
//! original's documentation says). The original's later code wrote hyphenated keys
//! (`resource-booking-managed`, …); those are recognised too when reading, so groups tagged for
//! the original are discovered unchanged. Writes always use the configured prefix.

use std::collections::BTreeMap;

/// Default tag-key prefix.
pub const DEFAULT_PREFIX: &str = "resource-booking/";
/// Prefix of the original's hyphenated keys.
pub const LEGACY_PREFIX: &str = "resource-booking-";
/// Tag EC2 Auto Scaling puts on the instances of a group; such instances are never started or
/// stopped by the operator (the group would replace them).
pub const ASG_TAG: &str = "aws:autoscaling:groupName";

/// Whether `prefix` can prefix the operator's tag keys: 1–100 characters (AWS keys hold at
/// most 128, and the longest suffix is 12) not starting with `aws:`, which AWS reserves.
pub fn is_valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty() && prefix.len() <= 100 && !prefix.starts_with("aws:")
}

/// The tag keys, resolved once from the configured prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagKeys {
    prefix: String,
}

/// Which of the operator's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `managed` = `true` marks an instance as manageable.
    Managed,
    /// `application` = the group's tag, i.e. a Resource's `spec.tag`.
    Application,
    /// `locked-by` = the user holding the lock.
    LockedBy,
    /// `locked-until` = RFC 3339 end of the lock.
    LockedUntil,
    /// `lock-owner` = `<namespace>/<resource name>` of the Resource that wrote the lock (this
    /// project's addition: it tells our own locks from foreign ones).
    LockOwner,
    /// `namespace` = the one Kubernetes namespace whose Resources may claim the group (set by
    /// the operator on the instances; this project's addition).
    Namespace,
}

impl Key {
    fn suffix(self) -> &'static str {
        match self {
            Key::Managed => "managed",
            Key::Application => "application",
            Key::LockedBy => "locked-by",
            Key::LockedUntil => "locked-until",
            Key::LockOwner => "lock-owner",
            Key::Namespace => "namespace",
        }
    }
}

impl TagKeys {
    /// Keys with the given prefix (e.g. `resource-booking/`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The key the operator writes for `key`.
    pub fn key(&self, key: Key) -> String {
        format!("{}{}", self.prefix, key.suffix())
    }

    /// Every key form recognised for `key` when reading: the configured one first, then the
    /// original's hyphenated one (when different).
    pub fn read_forms(&self, key: Key) -> Vec<String> {
        let mut forms = vec![self.key(key)];
        let legacy = format!("{LEGACY_PREFIX}{}", key.suffix());
        if !forms.contains(&legacy) {
            forms.push(legacy);
        }
        forms
    }

    /// The value of `key` in `tags`, under any recognised form (the configured one wins).
    pub fn get<'a>(&self, tags: &'a BTreeMap<String, String>, key: Key) -> Option<&'a str> {
        self.read_forms(key)
            .iter()
            .find_map(|k| tags.get(k))
            .map(String::as_str)
    }

    /// Whether `tags` mark the instance as managed (`managed` = `true`, case-insensitive).
    pub fn is_managed(&self, tags: &BTreeMap<String, String>) -> bool {
        self.get(tags, Key::Managed)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// The lock keys present in `tags` under any form (what removing a lock must delete).
    pub fn lock_keys_present(&self, tags: &BTreeMap<String, String>) -> Vec<String> {
        [Key::LockedBy, Key::LockedUntil, Key::LockOwner]
            .into_iter()
            .flat_map(|k| self.read_forms(k))
            .filter(|k| tags.contains_key(k))
            .collect()
    }
}

impl Default for TagKeys {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn both_key_forms_are_read_and_the_configured_one_wins() {
        let keys = TagKeys::default();
        assert_eq!(
            keys.get(
                &tags(&[("resource-booking-application", "web")]),
                Key::Application
            ),
            Some("web")
        );
        assert_eq!(
            keys.get(
                &tags(&[
                    ("resource-booking-application", "old"),
                    ("resource-booking/application", "new")
                ]),
                Key::Application
            ),
            Some("new")
        );
        assert!(keys.is_managed(&tags(&[("resource-booking-managed", "TRUE")])));
        assert!(!keys.is_managed(&tags(&[("resource-booking/managed", "false")])));
        assert!(!keys.is_managed(&tags(&[])));
    }

    #[test]
    fn custom_prefix_writes_its_keys_and_still_reads_legacy_ones() {
        let keys = TagKeys::new("acme/");
        assert_eq!(keys.key(Key::LockedBy), "acme/locked-by");
        assert_eq!(
            keys.read_forms(Key::Managed),
            vec![
                "acme/managed".to_string(),
                "resource-booking-managed".to_string()
            ]
        );
        let present = keys.lock_keys_present(&tags(&[
            ("acme/locked-by", "u"),
            ("resource-booking-locked-until", "x"),
            ("other", "y"),
        ]));
        assert_eq!(
            present,
            vec!["acme/locked-by", "resource-booking-locked-until"]
        );
    }
}
