//! `manage` and `tag`, decided then done: the machines named are checked all together
//! ([`targets`]), the tag changes are computed from what they carry ([`plan`]), and only then
//! written ([`apply`]) — so an unknown ID changes nothing, and a dry run stops before the
//! first write.

use booking_controller::aws::{Ec2Api, RdsApi};
use booking_controller::model::ProviderType;
use booking_controller::reconcile::monitor::resource_name;
use booking_controller::tags::{Key, TagKeys};
use booking_shared::api::ResourceSpec;
use booking_shared::validation::validate_resource;
use serde::Serialize;

use super::conn::{Aws, failure};
use super::machines::{Kind, Machine, is_ec2_id};
use crate::error::{Error, Result};

/// What the command wants the machines to carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// The managed tag `true` (`manage`).
    Managed,
    /// No managed tag, under any key form (`manage --disable`).
    Unmanaged,
    /// The application tag with this group (`tag --group`).
    Group(String),
}

/// One tag of one machine, before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The machine.
    pub id: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Its region.
    pub region: String,
    /// The tag key.
    pub key: String,
    /// The value before; `None` when absent.
    pub old: Option<String>,
    /// The value after; `None` when removed.
    pub new: Option<String>,
    /// Whether the tag changes (else it already is as wanted, and nothing is written).
    pub changed: bool,
    /// RDS: the ARN written on.
    #[serde(skip)]
    pub arn: Option<String>,
}

/// Checks `--group` as an AWS tag value that a Resource's `spec.tag` can name (the shared
/// admission rule of `spec.tag`, and the characters RDS allows in a tag value — EC2 allows
/// more, but a group may hold either). Returns a warning when a ResourceMonitor cannot make a
/// Resource for it (a Resource can still be written by hand).
///
/// # Errors
/// [`Error::Usage`] naming `--group`, the value and the fix.
pub fn check_group(group: &str) -> Result<Option<String>> {
    let spec = ResourceSpec {
        type_: "ec2".into(),
        tag: group.to_owned(),
        ..Default::default()
    };
    if let Err(invalid) = validate_resource(&spec) {
        let why: Vec<&str> = invalid
            .0
            .iter()
            .filter(|v| v.field == "spec.tag")
            .map(|v| v.message.as_str())
            .collect();
        if !why.is_empty() {
            return Err(Error::Usage(format!(
                "--group {group:?} cannot be a Resource's spec.tag: {}",
                why.join("; ")
            )));
        }
    }
    if let Some((at, c)) = group.char_indices().find(|(_, c)| !is_tag_value_char(*c)) {
        return Err(Error::Usage(format!(
            "--group {group:?} holds {c:?} at byte {at}, which AWS does not allow in an RDS tag \
             value; use letters, digits, spaces and _ . : / = + - @ only, e.g. web or team-a"
        )));
    }
    if group.trim() != group {
        return Err(Error::Usage(format!(
            "--group {group:?} starts or ends with a space; AWS keeps it, and a Resource's \
             spec.tag would have to repeat it exactly: remove it"
        )));
    }
    // The name a ResourceMonitor gives the group's Resource (the same rule for every type).
    let auto = resource_name(ProviderType::Ec2, group, "", "").is_some();
    Ok((!auto).then(|| {
        format!(
            "the group {group:?} cannot form a Resource name (<type>.<group>: lower-case \
             letters, digits, '-' and '.'), so a ResourceMonitor will not create its Resource; \
             write one with spec.tag: {group:?}, or choose a group such as {:?}",
            suggested_group(group)
        )
    }))
}

/// The characters of an AWS tag value as RDS checks them (`[\p{L}\p{Z}\p{N}_.:/=+\-@]`).
fn is_tag_value_char(c: char) -> bool {
    !c.is_control()
        && (c.is_alphanumeric()
            || c.is_whitespace()
            || matches!(c, '_' | '.' | ':' | '/' | '=' | '+' | '-' | '@'))
}

/// `group` in lower case with other characters as `-`, for the warning's example.
fn suggested_group(group: &str) -> String {
    let s: String = group
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.') => c,
            _ => '-',
        })
        .collect();
    let s = s.trim_matches(|c| c == '-' || c == '.').to_owned();
    if s.is_empty() { "web".into() } else { s }
}

/// The machines named by `ids` among `found` (what a lookup in `regions` returned), in the
/// order given and each once.
///
/// # Errors
/// [`Error::NotFound`] naming every ID not found; [`Error::Usage`] for an ID found more than
/// once (in several regions, or as both a DB instance and a DB cluster), a terminated one, or
/// a DB instance of a DB cluster (its cluster is tagged instead). Nothing is written then.
pub fn targets<'a>(
    ids: &[String],
    found: &'a [Machine],
    regions: &[String],
) -> Result<Vec<&'a Machine>> {
    let mut unknown = Vec::new();
    let mut problems = Vec::new();
    let mut out: Vec<&Machine> = Vec::new();
    for id in ids {
        if out.iter().any(|m| &m.id == id) {
            continue;
        }
        let matches: Vec<&Machine> = found.iter().filter(|m| &m.id == id).collect();
        match matches.as_slice() {
            [] => unknown.push(id.as_str()),
            [m] if m.is_gone() => problems.push(format!(
                "{id} ({}, {}) is {}: it can no longer be booked",
                m.kind.as_str(),
                m.region,
                m.state
            )),
            [m] if m.cluster.is_some() => problems.push(format!(
                "{id} is a DB instance of the DB cluster {c}, which is started and stopped as \
                 one: give the cluster's identifier {c} instead",
                c = m.cluster.as_deref().unwrap_or_default()
            )),
            [m] => out.push(m),
            many => problems.push(format!(
                "{id} names {}: give --region with one region, or a cluster's or instance's own \
                 identifier",
                many.iter()
                    .map(|m| format!("a {} in {}", m.kind.as_str(), m.region))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )),
        }
    }
    if !unknown.is_empty() {
        let hint = if unknown
            .iter()
            .any(|id| id.starts_with("i-") && !is_ec2_id(id))
        {
            " (an EC2 instance ID is i- and 8 or 17 hexadecimal digits)"
        } else {
            ""
        };
        return Err(Error::NotFound(format!(
            "no EC2 instance, RDS DB instance or DB cluster {} in {}{hint}; nothing was changed. \
             Check the IDs with `kubectl booking instances`, or give the --region they are in",
            unknown.join(", "),
            regions.join(", ")
        )));
    }
    if !problems.is_empty() {
        return Err(Error::Usage(format!(
            "{}; nothing was changed",
            problems.join("; ")
        )));
    }
    Ok(out)
}

/// The tag changes that give `machines` what `want` says, one per machine and key, in the
/// machines' order. Writes use the configured key; removing the managed tag removes every
/// key form present (the original's hyphenated key would keep the machine managed).
pub fn plan(machines: &[&Machine], want: &Want, keys: &TagKeys) -> Vec<Change> {
    let mut out = Vec::new();
    for m in machines {
        let change = |key: String, new: Option<String>| {
            let old = m.tags.get(&key).cloned();
            Change {
                id: m.id.clone(),
                kind: m.kind,
                region: m.region.clone(),
                changed: old != new,
                key,
                old,
                new,
                arn: m.arn.clone(),
            }
        };
        match want {
            Want::Managed => out.push(change(keys.key(Key::Managed), Some("true".into()))),
            Want::Group(g) => out.push(change(keys.key(Key::Application), Some(g.clone()))),
            Want::Unmanaged => {
                let present: Vec<String> = keys
                    .read_forms(Key::Managed)
                    .into_iter()
                    .filter(|k| m.tags.contains_key(k))
                    .collect();
                if present.is_empty() {
                    out.push(change(keys.key(Key::Managed), None));
                }
                out.extend(present.into_iter().map(|k| change(k, None)));
            }
        }
    }
    out
}

/// Writes the changes that change something: EC2 tags with one CreateTags or DeleteTags per
/// region, key and value (up to 1,000 instances a call), RDS tags with AddTagsToResource or
/// RemoveTagsFromResource on each ARN.
///
/// # Errors
/// [`Error::Aws`] for the first call that failed, saying which changes were written before it.
pub async fn apply(aws: &Aws, changes: &[Change]) -> Result<()> {
    let ec2: &dyn Ec2Api = &aws.clients;
    let rds: &dyn RdsApi = &aws.clients;
    let mut done: Vec<&str> = Vec::new();
    let failed = |op: &str, region: &str, e, done: &[&str]| {
        let written = if done.is_empty() {
            "nothing was changed".to_owned()
        } else {
            format!("already changed: {}", done.join(", "))
        };
        Error::Aws(format!(
            "{} ({written}; run the command again to finish)",
            failure(op, region, &e)
        ))
    };
    // EC2: batch the instances that get the same tag in the same region.
    let mut batches: Vec<(&str, &str, Option<&str>, Vec<String>)> = Vec::new();
    for c in changes.iter().filter(|c| c.changed && c.kind == Kind::Ec2) {
        let key = (c.region.as_str(), c.key.as_str(), c.new.as_deref());
        match batches.iter_mut().find(|b| (b.0, b.1, b.2) == key) {
            Some(b) => b.3.push(c.id.clone()),
            None => batches.push((key.0, key.1, key.2, vec![c.id.clone()])),
        }
    }
    for (region, key, value, ids) in &batches {
        for chunk in ids.chunks(1000) {
            let r = match value {
                Some(v) => ec2
                    .create_tags(region, chunk, &[((*key).to_owned(), (*v).to_owned())])
                    .await
                    .map_err(|e| failed("CreateTags", region, e, &done)),
                None => ec2
                    .delete_tags(region, chunk, &[(*key).to_owned()])
                    .await
                    .map_err(|e| failed("DeleteTags", region, e, &done)),
            };
            r?;
            done.extend(chunk.iter().map(String::as_str));
        }
    }
    for c in changes.iter().filter(|c| c.changed && c.kind != Kind::Ec2) {
        let arn = c.arn.as_deref().ok_or_else(|| {
            Error::Aws(format!(
                "AWS described {} in {} without its ARN, so its tags cannot be written",
                c.id, c.region
            ))
        })?;
        match &c.new {
            Some(v) => rds
                .add_tags(&c.region, arn, &[(c.key.clone(), v.clone())])
                .await
                .map_err(|e| failed("AddTagsToResource", &c.region, e, &done))?,
            None => rds
                .remove_tags(&c.region, arn, std::slice::from_ref(&c.key))
                .await
                .map_err(|e| failed("RemoveTagsFromResource", &c.region, e, &done))?,
        }
        done.push(&c.id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use booking_controller::model::Member;

    use super::*;

    fn machine(kind: Kind, id: &str, region: &str, tags: &[(&str, &str)]) -> Machine {
        Machine::new(
            kind,
            region,
            Member {
                id: id.into(),
                arn: (kind != Kind::Ec2).then(|| format!("arn:aws:rds:{region}:1:db:{id}")),
                state: "running".into(),
                tags: tags
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            },
            &TagKeys::default(),
        )
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn groups_are_checked_as_a_resource_tag_and_an_aws_tag_value() {
        assert_eq!(check_group("web").unwrap(), None);
        assert_eq!(check_group("team-a.web").unwrap(), None);
        for (bad, says) in [
            ("", "is empty"),
            (&"x".repeat(257), "256"),
            ("web#1", "'#'"),
            ("web\n", "'\\n'"),
            (" web", "space"),
        ] {
            let e = check_group(bad).unwrap_err().to_string();
            assert!(e.starts_with("--group"), "{e}");
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let warning = check_group("Web App").unwrap().expect("a warning");
        assert!(warning.contains("\"web-app\""), "{warning}");
    }

    #[test]
    fn every_id_is_checked_before_anything_is_written() {
        let found = vec![
            machine(Kind::Ec2, "i-0123abcd", "eu-west-1", &[]),
            machine(Kind::Rds, "db", "eu-west-1", &[]),
            machine(Kind::Rds, "twice", "eu-west-1", &[]),
            machine(Kind::AuroraCluster, "twice", "eu-west-1", &[]),
        ];
        let regions = ids(&["eu-west-1"]);
        let got = targets(&ids(&["db", "i-0123abcd", "db"]), &found, &regions).unwrap();
        assert_eq!(
            got.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
            ["db", "i-0123abcd"]
        );
        let e = targets(&ids(&["db", "nope", "i-0bad"]), &found, &regions)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope, i-0bad in eu-west-1"), "{e}");
        assert!(e.contains("8 or 17 hexadecimal"), "{e}");
        assert!(e.contains("nothing was changed"), "{e}");
        let e = targets(&ids(&["twice"]), &found, &regions)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a rds in eu-west-1 and a aurora-cluster in eu-west-1"),
            "{e}"
        );

        let mut member = machine(Kind::Rds, "ledger-1", "eu-west-1", &[]);
        member.cluster = Some("ledger".into());
        let mut gone = machine(Kind::Ec2, "i-0000dead", "eu-west-1", &[]);
        gone.state = "terminated".into();
        let found = [member, gone];
        let e = targets(&ids(&["ledger-1", "i-0000dead"]), &found, &regions)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("give the cluster's identifier ledger instead"),
            "{e}"
        );
        assert!(e.contains("is terminated"), "{e}");
    }

    #[test]
    fn plans_say_old_and_new_and_what_is_already_so() {
        let keys = TagKeys::default();
        let a = machine(Kind::Ec2, "i-0000000a", "eu-west-1", &[]);
        let b = machine(
            Kind::Rds,
            "db",
            "eu-west-1",
            &[
                ("resource-booking/managed", "true"),
                ("resource-booking-managed", "true"),
                ("resource-booking/application", "web"),
            ],
        );
        let p = plan(&[&a, &b], &Want::Managed, &keys);
        assert_eq!(
            p.iter()
                .map(|c| (c.id.as_str(), c.old.as_deref(), c.new.as_deref(), c.changed))
                .collect::<Vec<_>>(),
            [
                ("i-0000000a", None, Some("true"), true),
                ("db", Some("true"), Some("true"), false)
            ]
        );
        let p = plan(&[&a, &b], &Want::Unmanaged, &keys);
        assert_eq!(
            p.iter()
                .map(|c| (c.id.as_str(), c.key.as_str(), c.changed))
                .collect::<Vec<_>>(),
            [
                ("i-0000000a", "resource-booking/managed", false),
                ("db", "resource-booking/managed", true),
                ("db", "resource-booking-managed", true),
            ]
        );
        let p = plan(&[&a, &b], &Want::Group("web".into()), &keys);
        assert_eq!(
            p.iter().map(|c| c.changed).collect::<Vec<_>>(),
            [true, false]
        );
        assert_eq!(p[1].arn.as_deref(), Some("arn:aws:rds:eu-west-1:1:db:db"));
    }
}
