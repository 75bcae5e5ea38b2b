//! moto: start, SDK clients, seeding tagged instances, reset, and the request recorder.

use booking_harness::TestDir;
use booking_harness::aws_query::Service;
use booking_harness::moto::{MotoServer, seed_ec2_instances, seed_rds_instance};

const APP_TAG: &str = "resource-booking-application";

#[tokio::test]
async fn seeds_tagged_instances_counts_calls_and_resets() {
    let dir = TestDir::new("moto").expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto starts");
    assert!(moto.endpoint_url().starts_with("http://127.0.0.1:"));
    assert!(
        moto.env()
            .iter()
            .any(|(k, v)| *k == "AWS_ENDPOINT_URL" && *v == moto.endpoint_url())
    );
    let ec2 = moto.ec2();
    let rds = moto.rds();

    // Nothing recorded before recording starts.
    assert_eq!(moto.action_counts().await.expect("counts").total(), 0);
    moto.start_recording().await.expect("start recording");

    let ids = seed_ec2_instances(&ec2, 3, &[(APP_TAG, "analytics"), ("team", "data")])
        .await
        .expect("seed ec2");
    assert_eq!(ids.len(), 3);
    let arn = seed_rds_instance(&rds, "analytics-db", &[(APP_TAG, "analytics")])
        .await
        .expect("seed rds");
    assert!(arn.contains("analytics-db"), "{arn}");

    // The tags are visible to a tag-filtered describe, as the controller will query them.
    let described = ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:{APP_TAG}"))
                .values("analytics")
                .build(),
        )
        .send()
        .await
        .expect("describe");
    let mut found: Vec<String> = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.instance_id().map(str::to_owned))
        .collect();
    found.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(found, expected);

    let stopped = ec2
        .stop_instances()
        .instance_ids(&ids[0])
        .send()
        .await
        .expect("stop");
    assert_eq!(stopped.stopping_instances().len(), 1);

    let dbs = rds
        .describe_db_instances()
        .send()
        .await
        .expect("describe dbs");
    let db = &dbs.db_instances()[0];
    assert_eq!(db.db_instance_identifier(), Some("analytics-db"));
    let tags = rds
        .list_tags_for_resource()
        .resource_name(&arn)
        .send()
        .await
        .expect("rds tags");
    assert!(
        tags.tag_list()
            .iter()
            .any(|t| t.key() == Some(APP_TAG) && t.value() == Some("analytics"))
    );
    rds.stop_db_instance()
        .db_instance_identifier("analytics-db")
        .send()
        .await
        .expect("stop db");

    let counts = moto.action_counts().await.expect("counts");
    assert_eq!(counts.get(Service::Ec2, "RunInstances"), 1);
    assert_eq!(counts.get(Service::Ec2, "DescribeInstances"), 1);
    assert_eq!(counts.get(Service::Ec2, "StopInstances"), 1);
    assert_eq!(counts.get(Service::Rds, "CreateDBInstance"), 1);
    assert_eq!(counts.get(Service::Rds, "DescribeDBInstances"), 1);
    assert_eq!(counts.get(Service::Rds, "ListTagsForResource"), 1);
    assert_eq!(counts.get(Service::Rds, "StopDBInstance"), 1);
    assert_eq!(counts.total(), 7, "{counts:?}");

    let recorded = moto.recorded_requests().await.expect("recording");
    let stop = recorded
        .iter()
        .map(|r| r.query())
        .find(|q| q.action.as_deref() == Some("StopInstances"))
        .expect("StopInstances recorded");
    assert_eq!(stop.resource_ids(), vec![ids[0].as_str()]);

    // Clearing the recording keeps recording on.
    moto.clear_recording().await.expect("clear");
    ec2.describe_instances().send().await.expect("describe");
    let counts = moto.action_counts().await.expect("counts");
    assert_eq!(counts.total(), 1, "{counts:?}");

    // Reset forgets the resources.
    moto.reset().await.expect("reset");
    let after = ec2.describe_instances().send().await.expect("describe");
    assert!(after.reservations().is_empty());
    let dbs = rds
        .describe_db_instances()
        .send()
        .await
        .expect("describe dbs");
    assert!(dbs.db_instances().is_empty());

    // Two describes since the clear were recorded (moto's own API is not); none after stop.
    moto.stop_recording().await.expect("stop recording");
    ec2.describe_instances().send().await.expect("describe");
    let counts = moto.action_counts().await.expect("counts");
    assert_eq!(
        counts.get(Service::Ec2, "DescribeInstances"),
        2,
        "{counts:?}"
    );
    assert_eq!(counts.total(), 3, "{counts:?}");
}
