//! End to end, the AWS commands of `kubectl booking` (`instances`, `manage`, `tag`): the real
//! `kubectl-booking` binary against moto (behind the harness's AWS proxy where the calls it
//! makes are counted) in two regions, and the run's shared control plane for the Resource
//! column.
//!
//! Run inside `booking-control-plane run -- …`; the binary comes from the target directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use aws_sdk_rds::types::Tag;
use booking_harness::TestDir;
use booking_harness::moto::{self, MotoServer, REGION};
use booking_harness::proxy::FaultProxy;
use booking_shared::api::Resource;
use booking_tests::e2e::*;
use kube::api::{Api, PostParams};

/// What one run of the plugin printed.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// The AWS variables a test must not inherit (the plugin gets only those the test gives).
const AWS_VARS: [&str; 12] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
];

/// Runs `kubectl-booking args` with `env` only for AWS, `HOME` at `home` (no `~/.aws`, no
/// `~/.kube`); at most 90 s.
async fn plugin(home: &Path, env: &[(&str, String)], args: &[&str]) -> Run {
    let mut cmd = tokio::process::Command::new(workspace_binary("kubectl-booking"));
    for var in AWS_VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove("KUBECONFIG")
        .env_remove("BOOKING_TAG_PREFIX")
        .env("HOME", home)
        .env("AWS_CONFIG_FILE", home.join("aws-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("aws-credentials"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("kubectl-booking finished within 90 s")
        .expect("kubectl-booking ran");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A home folder of the test's own, with empty AWS configuration and credentials files.
fn home(dir: &TestDir) -> std::path::PathBuf {
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("aws-config"), "").unwrap();
    std::fs::write(home.join("aws-credentials"), "").unwrap();
    home
}

fn rds_tags(pairs: &[(&str, &str)]) -> Vec<Tag> {
    pairs
        .iter()
        .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
        .collect()
}

/// The tags of the EC2 instance `id`.
async fn ec2_tags(ec2: &aws_sdk_ec2::Client, id: &str) -> BTreeMap<String, String> {
    instances(ec2, &[id.to_owned()]).await[0]
        .1
        .iter()
        .cloned()
        .collect()
}

/// The tags on an RDS ARN.
async fn tags_on(rds: &aws_sdk_rds::Client, arn: &str) -> BTreeMap<String, String> {
    rds.list_tags_for_resource()
        .resource_name(arn)
        .send()
        .await
        .expect("ListTagsForResource")
        .tag_list()
        .iter()
        .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
        .collect()
}

/// An Aurora cluster `id` with `tags` and one untagged DB instance `<id>-1`; its ARN.
async fn aurora(rds: &aws_sdk_rds::Client, id: &str, tags: &[(&str, &str)]) -> String {
    let out = rds
        .create_db_cluster()
        .db_cluster_identifier(id)
        .engine("aurora-postgresql")
        .master_username("booking")
        .master_user_password("booking-test-password")
        .set_tags((!tags.is_empty()).then(|| rds_tags(tags)))
        .send()
        .await
        .expect("CreateDBCluster");
    rds.create_db_instance()
        .db_instance_identifier(format!("{id}-1"))
        .db_cluster_identifier(id)
        .engine("aurora-postgresql")
        .db_instance_class("db.r5.large")
        .send()
        .await
        .expect("CreateDBInstance in a cluster");
    out.db_cluster()
        .and_then(|c| c.db_cluster_arn())
        .expect("cluster ARN")
        .to_owned()
}

fn rds_in(moto: &MotoServer, region: &str) -> aws_sdk_rds::Client {
    let conf = aws_sdk_rds::config::Builder::from(&moto.sdk_config())
        .region(aws_config::Region::new(region.to_owned()))
        .build();
    aws_sdk_rds::Client::from_conf(conf)
}

/// `id` as a placeholder of the same length, so the columns stay where they are.
fn placeholder(name: &str) -> String {
    format!("i-{name:0>17}")
}

const MANAGED: (&str, &str) = ("resource-booking/managed", "true");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_lists_every_machine_with_its_group_resource_and_lock() {
    let e = env("plugin-instances").await;
    let home = home(&e.dir);
    let ec2 = ec2_in(&e.moto, REGION);
    let ec2_other = ec2_in(&e.moto, OTHER_REGION);
    let rds = e.moto.rds();

    let web = stopped_group(&ec2, 2, "web").await;
    ec2.create_tags()
        .resources(&web[1])
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("resource-booking/locked-by")
                .value("alice")
                .build(),
        )
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("resource-booking/locked-until")
                .value("2026-12-02T10:00:00Z")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let plain = moto::seed_ec2_instances(&ec2, 1, &[]).await.unwrap();
    // The original's hyphenated keys, in the other region.
    let legacy = moto::seed_ec2_instances(
        &ec2_other,
        1,
        &[
            ("resource-booking-managed", "true"),
            ("resource-booking-application", "web"),
        ],
    )
    .await
    .unwrap();
    aurora(
        &rds,
        "ledger",
        &[MANAGED, ("resource-booking/application", "ledger")],
    )
    .await;
    moto::seed_rds_instance(
        &rds,
        "reports-db",
        &[("resource-booking/application", "reports")],
    )
    .await
    .unwrap();

    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    for r in [
        resource("ec2.web", "ec2", "web", None),
        resource("ec2.web.us-west-2", "ec2", "web", Some(OTHER_REGION)),
        resource("rds.ledger", "rds", "ledger", Some(REGION)),
    ] {
        resources.create(&PostParams::default(), &r).await.unwrap();
    }

    let kubeconfig = e.cluster.kubeconfig_path().to_str().unwrap().to_owned();
    let env = e.moto.env();
    let base = [
        "--kubeconfig",
        kubeconfig.as_str(),
        "-n",
        e.ns.as_str(),
        "instances",
        "--region",
        REGION,
        "--region",
        OTHER_REGION,
    ];
    let run = plugin(&home, &env, &base).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "", "no warning with a reachable cluster");
    println!("kubectl booking instances:\n{}", run.stdout);

    // The order: by region, EC2 before RDS, by ID, a cluster's instances after it.
    let mut eu_ec2 = [web[0].clone(), web[1].clone(), plain[0].clone()];
    eu_ec2.sort();
    let order: Vec<String> = eu_ec2
        .iter()
        .cloned()
        .chain(["ledger", "ledger-1", "reports-db"].map(String::from))
        .chain(legacy.iter().cloned())
        .collect();
    let names: BTreeMap<&str, String> = [
        (web[0].as_str(), placeholder("web1")),
        (web[1].as_str(), placeholder("web2")),
        (plain[0].as_str(), placeholder("plain")),
        (legacy[0].as_str(), placeholder("legacy")),
    ]
    .into();
    let golden = "\
ID                    TYPE             REGION         STATE       MANAGED   GROUP     CLUSTER   RESOURCE            LOCKED BY   LOCKED UNTIL
i-0000000000000web1   ec2              eu-central-1   stopped     true      web                 ec2.web
i-0000000000000web2   ec2              eu-central-1   stopped     true      web                 ec2.web             alice       2026-12-02T10:00:00Z
i-000000000000plain   ec2              eu-central-1   running
ledger                aurora-cluster   eu-central-1   available   true      ledger              rds.ledger
ledger-1              rds              eu-central-1   available                       ledger    rds.ledger
reports-db            rds              eu-central-1   available             reports
i-00000000000legacy   ec2              us-west-2      running     true      web                 ec2.web.us-west-2
";
    let golden_rows: BTreeMap<&str, &str> = golden
        .lines()
        .skip(1)
        .map(|l| (l.split_whitespace().next().unwrap(), l))
        .collect();
    let mut expected = golden.lines().next().unwrap().to_owned() + "\n";
    for id in &order {
        let shown = names
            .get(id.as_str())
            .cloned()
            .unwrap_or_else(|| id.clone());
        expected.push_str(golden_rows[shown.as_str()]);
        expected.push('\n');
    }
    let mut got = run.stdout.clone();
    for (id, name) in &names {
        got = got.replace(id, name);
    }
    assert_eq!(got, expected);

    // The same rows as JSON, in the same order.
    let json = plugin(&home, &env, &[&base[..], &["-o", "json"]].concat()).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json.stdout).expect("JSON");
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, order.iter().map(String::as_str).collect::<Vec<_>>());
    let member = &rows[4];
    assert_eq!(member["cluster"], "ledger");
    assert_eq!(member["managed"], true, "managed with its cluster");
    assert_eq!(member["resource"], "rds.ledger");
    let locked = rows.iter().find(|r| r["id"] == web[1].as_str()).unwrap();
    assert_eq!(
        (&locked["lockedBy"], &locked["lockedUntil"]),
        (&"alice".into(), &"2026-12-02T10:00:00Z".into())
    );

    // --managed, --type, -A and YAML.
    let yaml = plugin(
        &home,
        &env,
        &[
            &base[..],
            &["--managed", "--type", "rds", "-A", "-o", "yaml"],
        ]
        .concat(),
    )
    .await;
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    let rows: Vec<serde_json::Value> = serde_yaml::from_str(&yaml.stdout).expect("YAML");
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["ledger", "ledger-1"]);
    // With -A the Resource is named with its namespace. The run's other tests share the control
    // plane, and another namespace may claim the same group first (the claim order is the
    // controller's), so only the form is checked here; the namespaced listing above names ours.
    let held = rows[0]["resource"]
        .as_str()
        .expect("a Resource holds the cluster's group");
    assert!(
        held.ends_with("/rds.ledger") && held.len() > "/rds.ledger".len(),
        "-A names the holding Resource as namespace/name: {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_without_kubernetes_still_lists_with_one_warning() {
    let dir = TestDir::new("plugin-no-kube").unwrap();
    let moto = MotoServer::start(&dir).await.unwrap();
    let home = home(&dir);
    let ids = stopped_group(&moto.ec2(), 1, "web").await;
    // A kubeconfig whose API server does not listen, and none at all.
    let dead = dir.path().join("dead-kubeconfig");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n\
         current-context: c\n",
    )
    .unwrap();
    for args in [
        vec!["--kubeconfig", dead.to_str().unwrap(), "instances"],
        vec!["instances"],
    ] {
        let run = plugin(&home, &moto.env(), &args).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        let warnings: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(warnings.len(), 1, "{}", run.stderr);
        assert!(
            warnings[0].starts_with("warning: the RESOURCE column is left empty: "),
            "{}",
            run.stderr
        );
        let row = run.stdout.lines().nth(1).expect("a row");
        assert!(row.starts_with(&ids[0]), "{}", run.stdout);
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            [ids[0].as_str(), "ec2", REGION, "stopped", "true", "web"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manage_and_tag_write_the_tags_once_in_every_region() {
    let dir = TestDir::new("plugin-retag").unwrap();
    let moto = MotoServer::start(&dir).await.unwrap();
    let proxy = FaultProxy::start(&moto.endpoint_url()).await.unwrap();
    let home = home(&dir);
    let ec2 = ec2_in(&moto, REGION);
    let ec2_other = ec2_in(&moto, OTHER_REGION);
    let a = moto::seed_ec2_instances(&ec2, 1, &[("resource-booking-managed", "true")])
        .await
        .unwrap()
        .remove(0);
    let b = moto::seed_ec2_instances(&ec2_other, 1, &[])
        .await
        .unwrap()
        .remove(0);
    let rds_other = rds_in(&moto, OTHER_REGION);
    let db = moto::seed_rds_instance(&rds_other, "reports-db", &[])
        .await
        .unwrap();
    let cluster = aurora(&moto.rds(), "ledger", &[]).await;
    let regions = ["--region", REGION, "--region", OTHER_REGION];
    let ids = [a.as_str(), b.as_str(), "reports-db", "ledger"];
    let env = proxy.env();

    let manage = [&["manage"][..], &ids, &regions].concat();
    let first = plugin(&home, &env, &manage).await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    println!("kubectl booking manage:\n{}", first.stdout);
    assert!(
        first
            .stdout
            .ends_with("4 tags changed, 0 already as wanted.\n"),
        "{}",
        first.stdout
    );
    assert!(
        first.stdout.lines().any(|l| l.starts_with("reports-db")
            && l.contains("us-west-2")
            && l.contains("(none) → true")),
        "{}",
        first.stdout
    );
    // The EC2 instances of one region and tag share one CreateTags; RDS tags go on each ARN.
    assert_eq!(proxy.count("CreateTags"), 2);
    assert_eq!(proxy.count("AddTagsToResource"), 2);
    for (tags, what) in [
        (ec2_tags(&ec2, &a).await, "a"),
        (ec2_tags(&ec2_other, &b).await, "b"),
        (tags_on(&rds_other, &db).await, "reports-db"),
        (tags_on(&moto.rds(), &cluster).await, "ledger"),
    ] {
        assert_eq!(
            tags.get("resource-booking/managed").map(String::as_str),
            Some("true"),
            "{what}: {tags:?}"
        );
    }

    // Twice: the same tags, nothing written.
    proxy.clear_requests();
    let again = plugin(&home, &env, &manage).await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again
            .stdout
            .ends_with("0 tags changed, 4 already as wanted.\n"),
        "{}",
        again.stdout
    );
    assert_eq!(
        proxy.count("CreateTags") + proxy.count("AddTagsToResource"),
        0
    );

    let tag = [&["tag"][..], &ids, &["--group", "web"], &regions].concat();
    for n in [4, 0] {
        let run = plugin(&home, &env, &tag).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout
                .ends_with(&format!("{n} tags changed, {} already as wanted.\n", 4 - n)),
            "{}",
            run.stdout
        );
    }
    assert_eq!(
        ec2_tags(&ec2_other, &b).await["resource-booking/application"],
        "web"
    );
    assert_eq!(
        tags_on(&moto.rds(), &cluster).await["resource-booking/application"],
        "web"
    );

    // --disable removes the managed tag under both key forms; the group stays.
    let disable = [&["manage", "--disable", a.as_str()][..], &regions].concat();
    let run = plugin(&home, &env, &disable).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let tags = ec2_tags(&ec2, &a).await;
    assert!(!tags.contains_key("resource-booking/managed"), "{tags:?}");
    assert!(!tags.contains_key("resource-booking-managed"), "{tags:?}");
    assert_eq!(tags["resource-booking/application"], "web");
    let listed = plugin(
        &home,
        &env,
        &["instances", "--managed", "-o", "json", "--region", REGION],
    )
    .await;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&listed.stdout).expect("JSON");
    assert!(
        rows.iter().all(|r| r["id"] != a.as_str()),
        "{}",
        listed.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_unknown_ids_and_bad_groups_write_nothing() {
    let dir = TestDir::new("plugin-dry-run").unwrap();
    let moto = MotoServer::start(&dir).await.unwrap();
    let proxy = FaultProxy::start(&moto.endpoint_url()).await.unwrap();
    let home = home(&dir);
    let ec2 = moto.ec2();
    let ids = stopped_group(&ec2, 2, "web").await;
    let db = moto::seed_rds_instance(&moto.rds(), "reports-db", &[])
        .await
        .unwrap();
    let before = (
        ec2_tags(&ec2, &ids[0]).await,
        tags_on(&moto.rds(), &db).await,
    );
    let writes = || {
        [
            "CreateTags",
            "DeleteTags",
            "AddTagsToResource",
            "RemoveTagsFromResource",
        ]
        .iter()
        .map(|a| proxy.count(a))
        .sum::<usize>()
    };
    let env = proxy.env();

    let run = plugin(
        &home,
        &env,
        &[
            "tag",
            ids[0].as_str(),
            ids[1].as_str(),
            "reports-db",
            "--group",
            "reporting",
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    println!("kubectl booking tag --dry-run:\n{}", run.stdout);
    let row = |id: &str| -> Vec<String> {
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_default();
        line.split("   ")
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect()
    };
    for (id, old) in [
        (ids[0].as_str(), "web"),
        (ids[1].as_str(), "web"),
        ("reports-db", "(none)"),
    ] {
        let cells = row(id);
        assert_eq!(
            cells[3..],
            [
                "resource-booking/application".to_owned(),
                format!("{old} → reporting"),
                "would change".to_owned()
            ],
            "{}",
            run.stdout
        );
    }
    assert!(
        run.stdout.ends_with(
            "Dry run: 3 tags would change, 0 already as wanted; nothing was written to AWS.\n"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("note: reports-db is not managed"),
        "{}",
        run.stderr
    );
    let run = plugin(
        &home,
        &env,
        &[
            "manage",
            "--disable",
            ids[0].as_str(),
            "--dry-run",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(report["dryRun"], true);
    assert_eq!(report["changes"][0]["old"], "true");
    assert_eq!(report["changes"][0]["new"], serde_json::Value::Null);
    assert!(proxy.count("DescribeInstances") >= 2, "the dry runs looked");
    assert_eq!(writes(), 0, "{:?}", proxy.requests());

    // Unknown IDs: named, and the known ones left alone.
    let run = plugin(
        &home,
        &env,
        &[
            "tag",
            ids[0].as_str(),
            "i-0000000000000dead",
            "no-such-db",
            "--group",
            "reporting",
        ],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("i-0000000000000dead, no-such-db in eu-central-1")
            && run.stderr.contains("nothing was changed"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout, "");

    // A group AWS or a Resource cannot hold: refused before any AWS call.
    proxy.clear_requests();
    for bad in ["web#1", ""] {
        let run = plugin(&home, &env, &["tag", ids[0].as_str(), "--group", bad]).await;
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(
            run.stderr.starts_with(&format!("error: --group {bad:?}")),
            "{}",
            run.stderr
        );
    }
    assert!(proxy.requests().is_empty(), "{:?}", proxy.requests());
    assert_eq!(writes(), 0);
    assert_eq!(
        (
            ec2_tags(&ec2, &ids[0]).await,
            tags_on(&moto.rds(), &db).await
        ),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_credentials_and_region_are_clear_errors() {
    let dir = TestDir::new("plugin-no-credentials").unwrap();
    let moto = MotoServer::start(&dir).await.unwrap();
    let proxy = FaultProxy::start(&moto.endpoint_url()).await.unwrap();
    let home = home(&dir);
    let no_credentials = [
        ("AWS_ENDPOINT_URL", proxy.endpoint_url()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ];
    for args in [
        &["instances", "--region", REGION][..],
        &["manage", "i-0123456789abcdef0", "--region", REGION],
    ] {
        let run = plugin(&home, &no_credentials, args).await;
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(
            run.stderr.starts_with("error: no AWS credentials found; provide them as for the AWS CLI: AWS_ACCESS_KEY_ID"),
            "{}",
            run.stderr
        );
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    }
    let no_region: Vec<(&str, String)> = moto
        .env()
        .into_iter()
        .filter(|(k, _)| !k.ends_with("REGION"))
        .collect();
    let run = plugin(&home, &no_region, &["instances"]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with("error: no AWS region: give --region"),
        "{}",
        run.stderr
    );
    let run = plugin(&home, &moto.env(), &["instances", "--region", "Frankfurt"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--region \"Frankfurt\""),
        "{}",
        run.stderr
    );
    assert!(proxy.requests().is_empty(), "{:?}", proxy.requests());
}
