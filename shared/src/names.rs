//! Names and label values derived from user-chosen names, kept within a length bound.

use sha2::{Digest, Sha256};

/// `name` shortened to at most `max` characters: a readable prefix of it (only
/// `[A-Za-z0-9._-]`, starting and ending alphanumeric), `-`, and the first `hash_len` hex digits
/// of its SHA-256, so that two long names sharing a prefix stay apart. Only the hash when no
/// readable prefix is left. Stable across versions: names derived with it (a scheduler's
/// bookings, label values) must not change on an upgrade.
pub fn shorten(name: &str, max: usize, hash_len: usize) -> String {
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    let hash = &digest[..hash_len.min(digest.len())];
    let prefix: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(max.saturating_sub(hash.len() + 1))
        .collect();
    let prefix = prefix.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if prefix.is_empty() {
        hash.to_owned()
    } else {
        format!("{prefix}-{hash}")
    }
}

#[cfg(test)]
mod tests {
    use super::shorten;

    #[test]
    fn shortened_names_are_bounded_distinct_and_readable() {
        let long = "s".repeat(100);
        let a = shorten(&long, 63, 8);
        let b = shorten(&format!("{long}x"), 63, 8);
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.starts_with("sssss"), "{a}");
        // Trailing separators of the prefix are dropped; nothing readable leaves the hash.
        assert!(!shorten(&format!("{}-{}", "a".repeat(40), "b".repeat(40)), 50, 8).contains("--"));
        assert_eq!(shorten("!!!", 10, 8).len(), 8);
    }
}
