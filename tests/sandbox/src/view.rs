//! The demo's live view: bookings, resources, instance states in moto, mails received and
//! Events, redrawn every two seconds.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use booking_shared::api::{Booking, BookingScheduler, Resource};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use crate::stack::{self, REGION, SECOND_REGION, Settings};

/// Renders one frame of the view.
pub async fn render(s: &Settings, client: &kube::Client) -> String {
    let mut out = String::new();
    let now = chrono::Utc::now();
    let _ = writeln!(
        out,
        "Booking sandbox — {} UTC — namespace {} — Ctrl-C stops everything\n",
        now.format("%H:%M:%S"),
        s.namespace
    );
    section(&mut out, "BOOKINGS", bookings(s, client).await);
    section(&mut out, "SCHEDULERS", schedulers(s, client).await);
    section(&mut out, "RESOURCES", resources(s, client).await);
    section(&mut out, "INSTANCES (moto)", instances(s).await);
    section(&mut out, "MAILS RECEIVED", mails(&s.mail_dir()));
    section(&mut out, "EVENTS (latest 12)", events(s, client).await);
    let _ = writeln!(
        out,
        "From another shell:  set -a; source {}; set +a; \"$KUBECTL\" get bookings,resources -n \"$NAMESPACE\"",
        s.env_file().display()
    );
    out
}

/// Whether `frame` shows anything `last` did not, its first line (the clock) aside. Pure.
pub fn changed(last: Option<&str>, frame: &str) -> bool {
    fn body(f: &str) -> &str {
        f.split_once('\n').map_or("", |(_, rest)| rest)
    }
    last.is_none_or(|last| body(last) != body(frame))
}

fn section(out: &mut String, title: &str, body: Result<String>) {
    let _ = writeln!(out, "== {title}");
    match body {
        Ok(b) if b.is_empty() => out.push_str("   (none)\n"),
        Ok(b) => out.push_str(&b),
        Err(e) => {
            let _ = writeln!(out, "   (unavailable: {e:#})");
        }
    }
    out.push('\n');
}

fn short_time(t: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|d| d.with_timezone(&chrono::Utc).format("%H:%M:%S").to_string())
        .unwrap_or_else(|_| t.to_owned())
}

async fn bookings(s: &Settings, client: &kube::Client) -> Result<String> {
    let api = Api::<Booking>::namespaced(client.clone(), &s.namespace);
    let mut list = api.list(&ListParams::default()).await?.items;
    list.sort_by(|a, b| a.spec.start_at.cmp(&b.spec.start_at));
    let mut out = format!(
        "   {:<38} {:<24} {:>8} {:>8} {:<12} {}\n",
        "NAME", "RESOURCE", "START", "END", "STATUS", "NOTIFIED"
    );
    for b in list.iter().rev().take(8).rev() {
        let status = b.status.clone().unwrap_or_default();
        let _ = writeln!(
            out,
            "   {:<38} {:<24} {:>8} {:>8} {:<12} {}",
            b.metadata.name.clone().unwrap_or_default(),
            b.spec.resource_name,
            short_time(&b.spec.start_at),
            short_time(&b.spec.end_at),
            status.status.map_or("-", |p| p.as_str()),
            if status.notifications_sent.is_empty() && !status.notification_sent {
                "-".to_owned()
            } else {
                format!("yes ({})", status.notifications_sent.len().max(1))
            }
        );
    }
    Ok(out)
}

async fn schedulers(s: &Settings, client: &kube::Client) -> Result<String> {
    let api = Api::<BookingScheduler>::namespaced(client.clone(), &s.namespace);
    let mut out = String::new();
    for b in api.list(&ListParams::default()).await?.items {
        let status = b.status.clone().unwrap_or_default();
        let _ = writeln!(
            out,
            "   {} schedule {:?} -> {}; last fired {}, next {}",
            b.metadata.name.clone().unwrap_or_default(),
            b.spec.schedule,
            b.spec.booking_template.resource_name,
            status
                .last_fire_time
                .as_deref()
                .map_or("-".into(), short_time),
            status.next.as_deref().map_or("-".into(), short_time),
        );
    }
    Ok(out)
}

async fn resources(s: &Settings, client: &kube::Client) -> Result<String> {
    let api = Api::<Resource>::namespaced(client.clone(), &s.namespace);
    let mut out = format!(
        "   {:<24} {:<14} {:>9} {:>7} {:<10} {}\n",
        "NAME", "REGION", "INSTANCES", "RUNNING", "STATE", "HELD BY"
    );
    for r in api.list(&ListParams::default()).await?.items {
        let st = r.status.clone().unwrap_or_default();
        let _ = writeln!(
            out,
            "   {:<24} {:<14} {:>9} {:>7} {:<10} {}",
            r.metadata.name.clone().unwrap_or_default(),
            r.spec.region.clone().unwrap_or_else(|| "-".into()),
            st.instances,
            st.running,
            st.status
                .and_then(|s| serde_json::to_value(s).ok())
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "-".into()),
            st.active_booking.unwrap_or_else(|| "-".into()),
        );
    }
    Ok(out)
}

async fn instances(s: &Settings) -> Result<String> {
    let endpoint = format!("http://127.0.0.1:{}", s.ports().moto);
    let app_key = format!("{}application", s.tag_prefix);
    let mut out = String::new();
    for region in [REGION, SECOND_REGION] {
        let ec2 = aws_sdk_ec2::Client::new(&stack::sdk_config(&endpoint, region));
        let resp = ec2
            .describe_instances()
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", aws_sdk_ec2::error::DisplayErrorContext(e)))?;
        for inst in resp.reservations().iter().flat_map(|r| r.instances()) {
            let group = inst
                .tags()
                .iter()
                .find(|t| t.key() == Some(app_key.as_str()))
                .and_then(|t| t.value())
                .unwrap_or("-");
            let _ = writeln!(
                out,
                "   ec2 {:<14} {:<22} group {:<14} {}",
                region,
                inst.instance_id().unwrap_or("-"),
                group,
                inst.state()
                    .and_then(|s| s.name())
                    .map_or("-", |n| n.as_str())
            );
        }
    }
    let rds = aws_sdk_rds::Client::new(&stack::sdk_config(&endpoint, REGION));
    let resp = rds
        .describe_db_instances()
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", aws_sdk_rds::error::DisplayErrorContext(e)))?;
    for db in resp.db_instances() {
        let _ = writeln!(
            out,
            "   rds {:<14} {:<22} {:<20} {}",
            REGION,
            db.db_instance_identifier().unwrap_or("-"),
            "",
            db.db_instance_status().unwrap_or("-")
        );
    }
    Ok(out)
}

/// One line per received message: file, recipients, subject.
fn mails(dir: &Path) -> Result<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "eml"))
        .collect();
    files.sort();
    let mut out = String::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let header = |name: &str| {
            text.lines()
                .take_while(|l| !l.is_empty())
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.trim().to_owned())
                })
                .unwrap_or_default()
        };
        let _ = writeln!(
            out,
            "   {}  to {}  \"{}\"",
            f.file_name().unwrap_or_default().to_string_lossy(),
            header("To"),
            header("Subject")
        );
    }
    Ok(out)
}

async fn events(s: &Settings, client: &kube::Client) -> Result<String> {
    let api = Api::<Event>::namespaced(client.clone(), &s.namespace);
    let mut list = api.list(&ListParams::default()).await?.items;
    let when = |e: &Event| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
            .or_else(|| {
                e.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            })
            .unwrap_or_default()
    };
    list.sort_by_key(|e| when(e));
    let mut out = String::new();
    for e in list.iter().rev().take(12).rev() {
        let _ = writeln!(
            out,
            "   {:<8} {:<24} {}/{}: {}",
            e.type_.clone().unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
            e.involved_object.kind.clone().unwrap_or_default(),
            e.involved_object.name.clone().unwrap_or_default(),
            e.message.clone().unwrap_or_default()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::changed;

    #[test]
    fn a_frame_is_new_unless_only_its_clock_moved() {
        let a = "Booking sandbox — 10:00:00 UTC\n== BOOKINGS\n   demo-web SCHEDULED\n";
        let later = "Booking sandbox — 10:00:02 UTC\n== BOOKINGS\n   demo-web SCHEDULED\n";
        let started = "Booking sandbox — 10:00:04 UTC\n== BOOKINGS\n   demo-web IN PROGRESS\n";
        assert!(changed(None, a));
        assert!(!changed(Some(a), later));
        assert!(changed(Some(later), started));
    }
}
