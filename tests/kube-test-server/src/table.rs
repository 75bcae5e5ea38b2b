//! `meta.k8s.io/v1` Table rendering (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`),
//! using a CRD's `additionalPrinterColumns` or a few built-in column sets.

use serde_json::{Value, json};

use crate::registry::{PrinterColumn, ResourceType};

/// What each row carries in `object` (`?includeObject=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The full object.
    Object,
}

impl IncludeObject {
    /// Parse `?includeObject=`.
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Whether an `Accept` header asks for `PartialObjectMetadata(List)`.
pub fn wants_metadata(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=PartialObjectMetadata"))
}

/// An object reduced to `PartialObjectMetadata`.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

fn columns_for(t: &ResourceType, version: &str) -> Vec<PrinterColumn> {
    let col = |name: &str, type_: &str, path: &str, priority: i64| PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        json_path: path.into(),
        description: String::new(),
        priority,
    };
    if let Some(info) = t.version_info(version) {
        let mut cols = info.columns.clone();
        if !cols
            .iter()
            .any(|c| c.json_path == ".metadata.creationTimestamp")
        {
            cols.push(col("Age", "date", ".metadata.creationTimestamp", 0));
        }
        return cols;
    }
    let age = col("Age", "date", ".metadata.creationTimestamp", 0);
    match (t.group.as_str(), t.plural.as_str()) {
        ("", "namespaces") => vec![col("Status", "string", ".status.phase", 0), age],
        ("", "secrets") => vec![
            col("Type", "string", ".type", 0),
            col("Data", "integer", "#data", 0),
            age,
        ],
        ("", "configmaps") => vec![col("Data", "integer", "#data", 0), age],
        ("", "events") => vec![
            col("Last Seen", "date", "#lastseen", 0),
            col("Type", "string", ".type", 0),
            col("Reason", "string", ".reason", 0),
            col("Object", "string", "#involved", 0),
            col("Message", "string", ".message", 0),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![col("Holder", "string", ".spec.holderIdentity", 0), age]
        }
        ("apiextensions.k8s.io", _) => vec![col(
            "Created At",
            "string",
            ".metadata.creationTimestamp",
            0,
        )],
        _ => vec![age],
    }
}

/// Evaluate a simple JSONPath (`.a.b[0].c`, `\.` escapes a dot in a key).
pub fn eval_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = path.strip_prefix('.').unwrap_or(path);
    if path.is_empty() {
        return Some(obj);
    }
    let mut segs = Vec::new();
    let mut cur = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '.' => segs.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    segs.push(cur);
    let mut v = obj;
    for seg in segs {
        let (name, indexes) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg.as_str(), ""),
        };
        if !name.is_empty() {
            v = v.get(name)?;
        }
        for idx in indexes.split('[').filter(|s| !s.is_empty()) {
            let n: usize = idx.trim_end_matches(']').parse().ok()?;
            v = v.get(n)?;
        }
    }
    Some(v)
}

/// `duration.HumanDuration` of the Kubernetes apimachinery, in seconds.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn cell(col: &PrinterColumn, obj: &Value, now: jiff::Timestamp) -> Value {
    match col.json_path.as_str() {
        "#data" => {
            let n = obj["data"].as_object().map(|m| m.len()).unwrap_or(0)
                + obj["binaryData"].as_object().map(|m| m.len()).unwrap_or(0);
            return json!(n);
        }
        "#lastseen" => {
            let seen = [
                &obj["series"]["lastObservedTime"],
                &obj["lastTimestamp"],
                &obj["eventTime"],
                &obj["metadata"]["creationTimestamp"],
            ]
            .into_iter()
            .find_map(|v| v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()));
            return match seen {
                Some(ts) => json!(human_duration(now.as_second() - ts.as_second())),
                None => json!("<unknown>"),
            };
        }
        "#involved" => {
            let io = &obj["involvedObject"];
            return json!(format!(
                "{}/{}",
                io["kind"].as_str().unwrap_or_default().to_lowercase(),
                io["name"].as_str().unwrap_or_default()
            ));
        }
        _ => {}
    }
    let Some(v) = eval_path(obj, &col.json_path).filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    if col.type_ == "date" {
        return match v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) {
            Some(ts) => json!(human_duration(now.as_second() - ts.as_second())),
            None => json!("<unknown>"),
        };
    }
    match (col.type_.as_str(), v) {
        ("integer", Value::Number(_))
        | ("number", Value::Number(_))
        | ("boolean", Value::Bool(_)) => v.clone(),
        (_, Value::String(s)) => json!(s),
        (_, other) => json!(other.to_string()),
    }
}

/// Render served objects as a Table.
pub fn render(
    t: &ResourceType,
    version: &str,
    objects: &[Value],
    resource_version: &str,
    include: IncludeObject,
) -> Value {
    let cols = columns_for(t, version);
    let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0})];
    for c in &cols {
        defs.push(json!({"name": c.name, "type": if c.type_ == "date" { "string" } else { c.type_.as_str() },
            "format": if c.type_ == "date" { "date" } else { c.format.as_str() },
            "description": c.description, "priority": c.priority}));
    }
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = vec![o["metadata"]["name"].clone()];
            cells.extend(cols.iter().map(|c| cell(c, o, now)));
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(o),
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_match_apimachinery() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (130, "2m10s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (9 * 3600, "9h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ];
        for (s, want) in cases {
            assert_eq!(human_duration(s), want, "{s}");
        }
    }

    #[test]
    fn event_rows_fall_back_to_event_time() {
        let t = crate::registry::builtins()
            .into_iter()
            .find(|t| t.plural == "events" && t.group.is_empty())
            .unwrap();
        let ev = json!({"metadata": {"name": "e"}, "eventTime": "2020-01-01T00:00:00.000000Z", "type": "Normal",
            "reason": "Started", "involvedObject": {"kind": "Resource", "name": "ec2.analytics"}, "message": "m"});
        let table = render(&t, "v1", &[ev], "1", IncludeObject::None);
        let cells = &table["rows"][0]["cells"];
        assert!(cells[1].as_str().unwrap().contains('y'), "{cells}");
        assert_eq!(cells[4], "resource/ec2.analytics");
    }

    #[test]
    fn paths() {
        let o = json!({"spec": {"a.b": 1, "l": [{"x": "y"}]}});
        assert_eq!(eval_path(&o, ".spec.a\\.b"), Some(&json!(1)));
        assert_eq!(eval_path(&o, ".spec.l[0].x"), Some(&json!("y")));
        assert_eq!(eval_path(&o, ".spec.missing"), None);
    }

    #[test]
    fn accept_headers() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(wants_metadata(
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
        ));
    }
}
