//! The rules and defaults of a Resource and a ResourceMonitor.

use super::*;

/// Validates a Resource's spec: `type` is supported (the message lists the supported types),
/// `tag` is a non-empty AWS tag value, `region` (if set) is an AWS region name, `booked_until`
/// (if set) is RFC 3339.
pub fn validate_resource(spec: &ResourceSpec) -> Outcome {
    let mut r = Report::default();
    check_resource_type(&mut r, "spec.type", &spec.type_);
    if spec.tag.trim().is_empty() {
        r.deny(
            "spec.tag",
            "spec.tag: \"\" is empty; give the value of the instances' resource-booking/application tag, e.g. analytics",
        );
    } else if spec.tag.chars().count() > MAX_TAG_VALUE_LEN {
        r.deny(
            "spec.tag",
            format!(
                "spec.tag: {:?} is longer than the {MAX_TAG_VALUE_LEN} characters AWS allows in a tag value; use the tag value the instances carry",
                spec.tag
            ),
        );
    }
    if let Some(region) = spec.region.as_deref() {
        check_region(&mut r, "spec.region", region);
    }
    if let Some(until) = spec.booked_until.as_deref().filter(|u| !u.is_empty())
        && let Err(e) = parse_rfc3339("spec.booked_until", until)
    {
        r.deny("spec.booked_until", e.to_string());
    }
    if spec.hibernate == Some(true) && spec.provider_type() == Some(ProviderType::Rds) {
        r.warn("spec.hibernate applies to ec2 only; it is ignored for an rds Resource");
    }
    r.finish()
}

/// Validates a ResourceMonitor's spec: `type` is supported, every region is an AWS region name.
pub fn validate_resource_monitor(spec: &ResourceMonitorSpec) -> Outcome {
    let mut r = Report::default();
    check_resource_type(&mut r, "spec.type", &spec.type_);
    for (i, region) in spec.regions.iter().enumerate() {
        check_region(&mut r, &format!("spec.regions[{i}]"), region);
    }
    r.finish()
}

/// Resources have no defaults filled at admission: an absent `region` means "the controller's
/// region", resolved at run time so that the stored object stays as written. Always empty;
/// present so that every kind has the same pair of functions.
pub fn default_resource(_resource: &mut Resource) -> Vec<Defaulted> {
    Vec::new()
}

/// ResourceMonitors have no defaults filled at admission (absent `regions` means the
/// controller's region, resolved at run time). Always empty.
pub fn default_resource_monitor(_monitor: &mut ResourceMonitor) -> Vec<Defaulted> {
    Vec::new()
}
