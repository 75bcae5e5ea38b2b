//! One owner per AWS group: a group — (type, tag, region) — is claimed by one Resource in the
//! whole cluster.
//!
//! The admission webhook denies a second Resource for a claimed group ([`other_claimer`]); when
//! the webhook was bypassed (not installed, `failurePolicy: Ignore`, a namespace opted out), the
//! controller lets only the first-created claimer act ([`first_claimer`]: earliest
//! `creationTimestamp`, then `namespace/name`), so that one namespace can never start, stop or
//! tag the machines another namespace books. Pure: the callers pass the Resources they cache.

use std::cmp::Ordering;

use crate::api::{ProviderType, Resource};

/// The AWS group a Resource claims. `region` is the Resource's `spec.region`, or the default
/// region given by the caller (`None` when the caller does not know it, as the webhook: then an
/// absent region only matches another absent region).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group<'a> {
    /// Provider type.
    pub kind: ProviderType,
    /// The instances' application tag value (AWS tags are case-sensitive).
    pub tag: &'a str,
    /// The region, if known.
    pub region: Option<&'a str>,
}

impl std::fmt::Display for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} group {:?}", self.kind, self.tag)?;
        match self.region {
            Some(r) => write!(f, " in region {r}"),
            None => f.write_str(" in the controller's region"),
        }
    }
}

/// The group `res` claims; `None` for an unsupported type (it claims nothing).
pub fn group_of<'a>(res: &'a Resource, default_region: Option<&'a str>) -> Option<Group<'a>> {
    Some(Group {
        kind: res.spec.provider_type()?,
        tag: res.spec.tag.as_str(),
        region: res
            .spec
            .region
            .as_deref()
            .filter(|r| !r.is_empty())
            .or(default_region),
    })
}

/// `namespace/name` of a Resource.
pub fn claimer_name(res: &Resource) -> String {
    format!(
        "{}/{}",
        res.metadata.namespace.as_deref().unwrap_or_default(),
        res.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The order of claims: earliest `creationTimestamp` first (an object without one, not yet
/// stored, comes last), then `namespace/name`.
pub fn claim_order(a: &Resource, b: &Resource) -> Ordering {
    let created = |r: &Resource| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (created(a), created(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then_with(|| claimer_name(a).cmp(&claimer_name(b)))
}

/// Another Resource (not `me` by namespace and name) claiming the same group as `me`; the
/// first in [`claim_order`] when several do.
pub fn other_claimer<'a>(
    me: &Resource,
    all: impl IntoIterator<Item = &'a Resource>,
    default_region: Option<&str>,
) -> Option<&'a Resource> {
    let mine = group_of(me, default_region)?;
    let is_me = |r: &Resource| {
        r.metadata.namespace == me.metadata.namespace && r.metadata.name == me.metadata.name
    };
    // Compared field by field: a reconcile looks at every Resource of the cluster.
    all.into_iter()
        .filter(|r| group_of(r, default_region).as_ref() == Some(&mine) && !is_me(r))
        .min_by(|a, b| claim_order(a, b))
}

/// The Resource that holds the group `me` claims, when it is not `me`: the other claimer that
/// comes before `me` in [`claim_order`].
pub fn first_claimer<'a>(
    me: &Resource,
    all: impl IntoIterator<Item = &'a Resource>,
    default_region: Option<&str>,
) -> Option<&'a Resource> {
    other_claimer(me, all, default_region).filter(|o| claim_order(o, me) == Ordering::Less)
}

/// The words of a claim held by `claimer`, for a denial, a condition and an Event.
pub fn claimed_message(group: &Group<'_>, claimer: &Resource) -> String {
    format!(
        "the {group} is already claimed by Resource {}; one Resource in the cluster manages an AWS group: book it through that Resource (a Booking in namespace {:?}), or have that Resource deleted first",
        claimer_name(claimer),
        claimer.metadata.namespace.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ResourceSpec;

    fn res(
        ns: &str,
        name: &str,
        tag: &str,
        region: Option<&str>,
        created: Option<i64>,
    ) -> Resource {
        let mut r = Resource::new(
            name,
            ResourceSpec {
                type_: "ec2".into(),
                tag: tag.into(),
                region: region.map(str::to_owned),
                ..Default::default()
            },
        );
        r.metadata.namespace = Some(ns.into());
        r.metadata.creation_timestamp = created
            .map(|s| crate::time::to_kube_time(chrono::DateTime::from_timestamp(s, 0).unwrap()));
        r
    }

    #[test]
    fn the_first_created_claimer_holds_the_group() {
        let a = res("team-a", "ec2.web", "web", None, Some(100));
        let b = res("team-b", "ec2.web", "web", None, Some(200));
        let other_tag = res("team-c", "ec2.db", "db", None, Some(50));
        let other_region = res("team-d", "ec2.web", "web", Some("us-east-1"), Some(10));
        let all = [a.clone(), b.clone(), other_tag, other_region];
        let region = Some("eu-central-1");
        assert!(first_claimer(&a, &all, region).is_none());
        assert_eq!(
            first_claimer(&b, &all, region).map(claimer_name),
            Some("team-a/ec2.web".into())
        );
        // The webhook sees any other claimer, whatever the order.
        assert_eq!(
            other_claimer(&a, &all, region).map(claimer_name),
            Some("team-b/ec2.web".into())
        );
        // An explicit region equal to the default is the same group for the controller.
        let explicit = res("team-e", "ec2.web", "web", Some("eu-central-1"), Some(300));
        assert_eq!(
            first_claimer(&explicit, &all, region).map(claimer_name),
            Some("team-a/ec2.web".into())
        );
        // A tie in creation time is broken by namespace/name; a new object comes last.
        let tie = res("team-0", "ec2.web", "web", None, Some(100));
        assert_eq!(
            first_claimer(&a, [&tie], region).map(claimer_name),
            Some("team-0/ec2.web".into())
        );
        let fresh = res("team-0", "x", "web", None, None);
        assert_eq!(
            first_claimer(&fresh, [&a], region).map(claimer_name),
            Some("team-a/ec2.web".into())
        );
        assert!(first_claimer(&a, [&fresh], region).is_none());
    }

    #[test]
    fn the_message_names_the_claimer_and_the_fix() {
        let a = res("team-a", "ec2.web", "web", None, Some(1));
        let b = res("team-b", "ec2.web", "web", None, Some(2));
        let group = group_of(&b, None).unwrap();
        let m = claimed_message(&group, &a);
        assert!(m.contains("team-a/ec2.web"), "{m}");
        assert!(m.contains("ec2 group \"web\""), "{m}");
        assert!(m.contains("book it through that Resource"), "{m}");
    }
}
