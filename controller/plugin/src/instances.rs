//! `instances`, `manage`, `tag`: the machines and their booking tags, over the controller's
//! AWS layer (its SDK clients, listings and tag keys), replacing the original's
//! `make list-instances`, `make mark-managed` and `make tag-instances`.
//!
//! - `instances` lists every EC2 instance, RDS DB instance and DB cluster of the regions with
//!   the operator's tags and the Resource holding each group (read from Kubernetes; without a
//!   reachable cluster the column stays empty, with one warning).
//! - `manage` and `tag` check every ID first and then write, so an unknown ID changes nothing;
//!   `--dry-run` stops before the first write ([`retag`]).

mod conn;
mod machines;
mod retag;

use std::io::Write;
use std::time::Duration;

use booking_controller::model::ProviderType;
use booking_shared::api::Resource;
use booking_shared::claims::{Group, claim_order, group_of};
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::cli::{AwsArgs, Global, InstancesArgs, ManageArgs, TagArgs};
use crate::error::{Error, Result};
use crate::kubeconn::Conn;
use crate::output;
use conn::Aws;
use machines::Machine;
use retag::{Change, Want};

/// Longest wait for the Resources to be listed.
const KUBE_TIMEOUT: Duration = Duration::from_secs(20);

/// `instances`.
pub async fn instances(global: &Global, args: &InstancesArgs, out: &mut dyn Write) -> Result<()> {
    let aws = Aws::connect(&args.aws).await?;
    let only = args.type_.as_deref().and_then(ProviderType::parse);
    let (listed, resources) = futures::join!(machines::list_all(&aws, only), resources(global));
    let mut all = listed?;
    match resources {
        Ok((resources, cross_namespace)) => {
            let holders: Vec<Option<String>> = all
                .iter()
                .map(|m| {
                    holder(
                        m,
                        &all,
                        &resources,
                        aws.default_region.as_deref(),
                        cross_namespace,
                    )
                })
                .collect();
            for (m, h) in all.iter_mut().zip(holders) {
                m.resource = h;
            }
        }
        Err(why) => eprintln!("warning: the RESOURCE column is left empty: {why}"),
    }
    if args.managed {
        all.retain(|m| m.managed);
    }
    if all.is_empty() && global.output == crate::cli::Output::Table {
        eprintln!(
            "No {}machines found in {}.",
            if args.managed { "managed " } else { "" },
            aws.regions.join(", ")
        );
        return Ok(());
    }
    output::print(out, global.output, &all, || instances_table(&all))
}

/// The `instances` table.
fn instances_table(all: &[Machine]) -> String {
    let cell = |v: &Option<String>| v.clone().unwrap_or_default();
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|m| {
            vec![
                m.id.clone(),
                m.kind.as_str().to_owned(),
                m.region.clone(),
                m.state.clone(),
                cell(&m.managed_tag),
                cell(&m.group),
                cell(&m.cluster),
                cell(&m.resource),
                cell(&m.locked_by),
                cell(&m.locked_until),
            ]
        })
        .collect();
    output::table(
        &[
            "ID",
            "TYPE",
            "REGION",
            "STATE",
            "MANAGED",
            "GROUP",
            "CLUSTER",
            "RESOURCE",
            "LOCKED BY",
            "LOCKED UNTIL",
        ],
        &rows,
    )
}

/// The Resources of the namespace (or of all, with `-A`), and whether they span namespaces;
/// why not, when Kubernetes is not configured or cannot be reached.
async fn resources(global: &Global) -> std::result::Result<(Vec<Resource>, bool), String> {
    let conn = Conn::new(global).await.map_err(|e| e.to_string())?;
    let api: Api<Resource> = if conn.all_namespaces {
        Api::all(conn.client.clone())
    } else {
        Api::namespaced(conn.client.clone(), &conn.namespace)
    };
    let where_ = if conn.all_namespaces {
        "in any namespace".to_owned()
    } else {
        format!("in namespace {:?}", conn.namespace)
    };
    match tokio::time::timeout(KUBE_TIMEOUT, api.list(&ListParams::default())).await {
        Ok(Ok(list)) => Ok((list.items, conn.all_namespaces)),
        Ok(Err(e)) => Err(format!(
            "cannot list the Resources {where_}: {}",
            Error::from_kube("list Resources", e)
        )),
        Err(_) => Err(format!(
            "the Resources {where_} were not listed within {}s",
            KUBE_TIMEOUT.as_secs()
        )),
    }
}

/// The Resource holding `m`'s group (its cluster's, for a cluster's DB instance): of those
/// claiming it, the first by the claim order the controller and the webhook use. A Resource
/// without `spec.region` is taken to mean `default_region` (the controller's region is most
/// likely the one the plugin is configured with).
fn holder(
    m: &Machine,
    all: &[Machine],
    resources: &[Resource],
    default_region: Option<&str>,
    cross_namespace: bool,
) -> Option<String> {
    let group = Group {
        kind: m.kind.provider(),
        tag: m.booked_group(all)?,
        region: Some(m.region.as_str()),
    };
    let first = resources
        .iter()
        .filter(|r| group_of(r, default_region).as_ref() == Some(&group))
        .min_by(|a, b| claim_order(a, b))?;
    let name = first.metadata.name.clone().unwrap_or_default();
    Some(if cross_namespace {
        format!(
            "{}/{name}",
            first.metadata.namespace.as_deref().unwrap_or_default()
        )
    } else {
        name
    })
}

/// `manage`.
pub async fn manage(global: &Global, args: &ManageArgs, out: &mut dyn Write) -> Result<()> {
    let want = if args.disable {
        Want::Unmanaged
    } else {
        Want::Managed
    };
    retag(global, &args.aws, &args.ids, want, args.dry_run, out).await
}

/// `tag`.
pub async fn tag(global: &Global, args: &TagArgs, out: &mut dyn Write) -> Result<()> {
    if let Some(warning) = retag::check_group(&args.group)? {
        eprintln!("warning: {warning}");
    }
    let want = Want::Group(args.group.clone());
    retag(global, &args.aws, &args.ids, want, args.dry_run, out).await
}

/// What `manage` and `tag` print as JSON or YAML.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    dry_run: bool,
    changes: &'a [Change],
}

async fn retag(
    global: &Global,
    aws_args: &AwsArgs,
    ids: &[String],
    want: Want,
    dry_run: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let aws = Aws::connect(aws_args).await?;
    let found = machines::find(&aws, ids).await?;
    let targets = retag::targets(ids, &found, &aws.regions)?;
    let changes = retag::plan(&targets, &want, &aws.keys);
    if !dry_run {
        retag::apply(&aws, &changes).await?;
    }
    if matches!(want, Want::Group(_)) {
        for m in targets.iter().filter(|m| !m.managed) {
            eprintln!(
                "note: {} is not managed, so the operator leaves it alone until `kubectl booking manage {}`",
                m.id, m.id
            );
        }
    }
    let report = Report {
        dry_run,
        changes: &changes,
    };
    output::print(out, global.output, &report, || {
        changes_table(&changes, dry_run)
    })
}

/// The `manage` / `tag` table and a line saying what changed.
fn changes_table(changes: &[Change], dry_run: bool) -> String {
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".into());
    let rows: Vec<Vec<String>> = changes
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                c.kind.as_str().to_owned(),
                c.region.clone(),
                c.key.clone(),
                format!("{} → {}", value(&c.old), value(&c.new)),
                match (c.changed, dry_run) {
                    (false, _) => "unchanged",
                    (true, true) => "would change",
                    (true, false) => "changed",
                }
                .to_owned(),
            ]
        })
        .collect();
    let mut s = output::table(&["ID", "TYPE", "REGION", "TAG", "CHANGE", "RESULT"], &rows);
    let changed = changes.iter().filter(|c| c.changed).count();
    let same = changes.len() - changed;
    let tags = |n: usize| if n == 1 { "tag" } else { "tags" };
    s.push_str(&if dry_run {
        format!(
            "Dry run: {changed} {} would change, {same} already as wanted; nothing was written to AWS.\n",
            tags(changed)
        )
    } else {
        format!(
            "{changed} {} changed, {same} already as wanted.\n",
            tags(changed)
        )
    });
    s
}

#[cfg(test)]
mod tests {
    use booking_controller::model::Member;
    use booking_controller::tags::TagKeys;
    use kube::api::ObjectMeta;

    use super::machines::Kind;
    use super::*;

    fn resource(ns: &str, name: &str, type_: &str, tag: &str, region: Option<&str>) -> Resource {
        Resource {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: booking_shared::api::ResourceSpec {
                type_: type_.into(),
                tag: tag.into(),
                region: region.map(str::to_owned),
                ..Default::default()
            },
            status: None,
        }
    }

    fn machine(kind: Kind, id: &str, region: &str, group: &str, cluster: Option<&str>) -> Machine {
        let tags = [("resource-booking/application".to_owned(), group.to_owned())];
        Machine::new(
            kind,
            region,
            Member {
                id: id.into(),
                tags: tags.into_iter().filter(|(_, v)| !v.is_empty()).collect(),
                db_cluster: cluster.map(str::to_owned),
                ..Default::default()
            },
            &TagKeys::default(),
        )
    }

    #[test]
    fn the_holder_matches_type_tag_and_region_and_names_the_namespace_across_them() {
        let all = [
            machine(Kind::Ec2, "i-0000000a", "eu-west-1", "web", None),
            machine(Kind::Ec2, "i-0000000b", "us-east-1", "web", None),
            machine(Kind::AuroraCluster, "ledger", "eu-west-1", "books", None),
            machine(Kind::Rds, "ledger-1", "eu-west-1", "", Some("ledger")),
            machine(Kind::Rds, "web", "eu-west-1", "web", None),
        ];
        let resources = [
            resource("team-a", "ec2.web", "ec2", "web", None),
            resource(
                "team-a",
                "ec2.web.us-east-1",
                "ec2",
                "web",
                Some("us-east-1"),
            ),
            resource("team-b", "rds.books", "rds", "books", Some("eu-west-1")),
        ];
        let got: Vec<Option<String>> = all
            .iter()
            .map(|m| holder(m, &all, &resources, Some("eu-west-1"), false))
            .collect();
        assert_eq!(
            got,
            [
                Some("ec2.web".into()),
                Some("ec2.web.us-east-1".into()),
                Some("rds.books".into()),
                Some("rds.books".into()),
                None,
            ]
        );
        assert_eq!(
            holder(&all[2], &all, &resources, Some("eu-west-1"), true).as_deref(),
            Some("team-b/rds.books")
        );
    }

    #[test]
    fn the_changes_table_says_old_new_and_what_happened() {
        let change = |id: &str, old: Option<&str>, changed| Change {
            id: id.into(),
            kind: Kind::Ec2,
            region: "eu-west-1".into(),
            key: "resource-booking/application".into(),
            old: old.map(str::to_owned),
            new: Some("web".into()),
            changed,
            arn: None,
        };
        let changes = [
            change("i-0000000a", None, true),
            change("i-0000000b", Some("web"), false),
        ];
        assert_eq!(
            changes_table(&changes, true),
            "ID           TYPE   REGION      TAG                            CHANGE         RESULT\n\
             i-0000000a   ec2    eu-west-1   resource-booking/application   (none) → web   would change\n\
             i-0000000b   ec2    eu-west-1   resource-booking/application   web → web      unchanged\n\
             Dry run: 1 tag would change, 1 already as wanted; nothing was written to AWS.\n"
        );
        assert!(changes_table(&changes, false).ends_with("1 tag changed, 1 already as wanted.\n"));
    }
}
