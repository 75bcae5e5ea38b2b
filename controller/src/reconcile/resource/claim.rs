//! Whether this Resource may act on its group at all: one owner per AWS group across the
//! cluster (the first-created claimer, see [`booking_shared::claims`]), and the operator's
//! restrictions — the instances' `<prefix>namespace` tag naming the one namespace that may claim
//! the group, and `--untagged-claim-namespaces` listing the namespaces that may claim groups
//! without that tag. A refused Resource touches nothing in AWS: its status says why
//! (`GroupClaimed` False) and a Warning Event names the claimer or the restriction.

use booking_shared::api::{Resource, ResourceStatus};
use booking_shared::claims::{claimed_message, first_claimer, group_of};
use chrono::{DateTime, Utc};

use crate::conditions::CondSpec;
use crate::context::Context;
use crate::error::Result;
use crate::model::Member;
use crate::reconcile::write_status;
use crate::tags::{Key, TagKeys};

/// The condition type of a claim.
pub const CONDITION: &str = "GroupClaimed";

/// Why a Resource may not act on its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// PascalCase reason: `ClaimedByAnother` or `NamespaceNotAllowed`.
    pub reason: &'static str,
    /// What holds the group and how to fix it.
    pub message: String,
}

/// The condition of a Resource that holds its group.
pub fn held() -> CondSpec {
    CondSpec::new(
        CONDITION,
        true,
        "Claimed",
        "this Resource is the one claimer of its AWS group",
    )
}

/// The refusal when an earlier-created Resource of `all` claims the same group as `res`.
/// Pure.
pub fn claimed_elsewhere<'a>(
    res: &Resource,
    all: impl IntoIterator<Item = &'a Resource>,
    default_region: &str,
) -> Option<Refusal> {
    let claimer = first_claimer(res, all, Some(default_region))?;
    let group = group_of(res, Some(default_region))?;
    Some(Refusal {
        reason: "ClaimedByAnother",
        message: claimed_message(&group, claimer),
    })
}

/// The refusal when the operator's restrictions keep namespace `ns` from claiming the group of
/// `members`: a member's namespace tag names another namespace, or no member carries one and
/// `untagged` (empty: every namespace) does not list `ns`. Pure.
pub fn namespace_refusal(
    ns: &str,
    members: &[Member],
    keys: &TagKeys,
    untagged: &[String],
) -> Option<Refusal> {
    let tagged: Vec<(&Member, &str)> = members
        .iter()
        .filter_map(|m| keys.get(&m.tags, Key::Namespace).map(|v| (m, v.trim())))
        .collect();
    if let Some((m, other)) = tagged.iter().find(|(_, v)| *v != ns) {
        return Some(Refusal {
            reason: "NamespaceNotAllowed",
            message: format!(
                "instance {} carries the tag {}={other}: only Resources in namespace {other:?} may claim this group, not namespace {ns:?}; book it from namespace {other:?}, or ask the operator to change the tag",
                m.id,
                keys.key(Key::Namespace)
            ),
        });
    }
    if tagged.is_empty() && !untagged.is_empty() && !untagged.iter().any(|n| n == ns) {
        return Some(Refusal {
            reason: "NamespaceNotAllowed",
            message: format!(
                "the group's instances carry no {} tag and namespace {ns:?} is not among the namespaces allowed to claim untagged groups ({}); ask the operator to tag the instances {}={ns} or to add {ns:?} to --untagged-claim-namespaces",
                keys.key(Key::Namespace),
                untagged.join(", "),
                keys.key(Key::Namespace)
            ),
        });
    }
    None
}

/// Why a ResourceMonitor in namespace `ns` may not create a Resource (named `name`) for the
/// `provider` group `tag` in `region`: another Resource of the cluster claims it, or the
/// operator's restrictions keep `ns` from claiming it.
pub fn monitor_refusal(
    ctx: &Context,
    ns: &str,
    name: &str,
    provider: crate::model::ProviderType,
    tag: &str,
    region: &str,
) -> Option<Refusal> {
    let mut candidate = Resource::new(
        name,
        booking_shared::api::ResourceSpec {
            type_: provider.as_str().to_owned(),
            tag: tag.to_owned(),
            region: Some(region.to_owned()),
            ..Default::default()
        },
    );
    candidate.metadata.namespace = Some(ns.to_owned());
    let all = ctx.caches.resources.state();
    if let Some(r) = claimed_elsewhere(
        &candidate,
        all.iter().map(|r| r.as_ref()),
        &ctx.groups.default_region,
    ) {
        return Some(r);
    }
    let key = crate::model::InventoryKey {
        kind: provider,
        region: region.to_owned(),
    };
    let members = ctx.groups.inventory.snapshot(&key)?.group(tag);
    namespace_refusal(
        ns,
        &members,
        &ctx.groups.keys,
        &ctx.groups.untagged_claim_namespaces,
    )
}

/// The status of a refused Resource: nothing observed or held, `Ready` and `GroupClaimed`
/// False with the refusal. Pure.
pub fn refused_status(res: &Resource, refusal: &Refusal, now: DateTime<Utc>) -> ResourceStatus {
    super::unobserved_status(
        res,
        &[
            CondSpec::new("Ready", false, refusal.reason, &refusal.message),
            CondSpec::new(CONDITION, false, refusal.reason, &refusal.message),
        ],
        now,
    )
}

/// Writes the refused status and, when the refusal is new (not already the stored condition),
/// a Warning Event naming it.
pub async fn refuse(ctx: &Context, res: &Resource, refusal: &Refusal) -> Result<()> {
    let known = res.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == CONDITION
                && c.status == "False"
                && c.reason == refusal.reason
                && c.message == refusal.message
        })
    });
    tracing::info!(reason = refusal.reason, message = %refusal.message, "the group is not ours to act on");
    write_status(ctx, res, &refused_status(res, refusal, ctx.now()), None).await?;
    if !known {
        ctx.events
            .publish(res, true, refusal.reason, "Claim", refusal.message.clone())
            .await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::ResourceSpec;

    fn member(id: &str, tags: &[(&str, &str)]) -> Member {
        Member {
            id: id.into(),
            arn: None,
            state: "stopped".into(),
            state_reason: None,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_namespace_tag_and_the_untagged_list_restrict_claims() {
        let keys = TagKeys::default();
        let ns_tag = "resource-booking/namespace";
        let none: Vec<String> = vec![];
        let only_ops = vec!["ops".to_owned()];
        let tagged_a = [member("i-1", &[(ns_tag, "team-a")]), member("i-2", &[])];
        let untagged = [member("i-1", &[])];
        // (namespace, members, untagged list) -> refused?
        type Row<'a> = (&'a str, &'a [Member], &'a Vec<String>, Option<&'a str>);
        let table: [Row<'_>; 6] = [
            ("team-a", &tagged_a, &none, None),
            (
                "team-b",
                &tagged_a,
                &none,
                Some("i-1 carries the tag resource-booking/namespace=team-a"),
            ),
            // The tag wins over the untagged list.
            ("team-a", &tagged_a, &only_ops, None),
            ("team-b", &untagged, &none, None),
            ("ops", &untagged, &only_ops, None),
            (
                "team-b",
                &untagged,
                &only_ops,
                Some("not among the namespaces allowed to claim untagged groups (ops)"),
            ),
        ];
        for (ns, members, list, want) in table {
            let got = namespace_refusal(ns, members, &keys, list);
            match (want, &got) {
                (None, None) => {}
                (Some(text), Some(r)) => {
                    assert_eq!(r.reason, "NamespaceNotAllowed");
                    assert!(r.message.contains(text), "{ns}: {}", r.message);
                }
                _ => panic!("{ns} {list:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn only_the_first_created_claimer_acts() {
        let res = |ns: &str, secs: i64| {
            let mut r = Resource::new(
                "ec2.web",
                ResourceSpec {
                    type_: "ec2".into(),
                    tag: "web".into(),
                    ..Default::default()
                },
            );
            r.metadata.namespace = Some(ns.into());
            r.metadata.creation_timestamp = Some(booking_shared::time::to_kube_time(
                DateTime::from_timestamp(secs, 0).unwrap(),
            ));
            r.metadata.generation = Some(1);
            r
        };
        let first = res("team-a", 100);
        let second = res("team-b", 200);
        let all = [first.clone(), second.clone()];
        assert_eq!(claimed_elsewhere(&first, &all, "eu-west-1"), None);
        let refusal = claimed_elsewhere(&second, &all, "eu-west-1").unwrap();
        assert_eq!(refusal.reason, "ClaimedByAnother");
        assert!(
            refusal.message.contains("team-a/ec2.web"),
            "{}",
            refusal.message
        );
        let now = DateTime::from_timestamp(300, 0).unwrap();
        let status = refused_status(&second, &refusal, now);
        let c = &status.conditions[1];
        assert_eq!((c.type_.as_str(), c.status.as_str()), (CONDITION, "False"));
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.instances, 0);
    }
}
