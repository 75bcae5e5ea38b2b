//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`), `metav1.LabelSelector` objects
//! and field selectors (`metadata.name`, `metadata.namespace` and, as a simplification, any dotted
//! path such as `involvedObject.uid` for Events).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::status::ApiError;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq)]
pub enum Requirement {
    /// `key=value` / `key==value`.
    Equals(String, String),
    /// `key!=value`.
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)`.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed label selector: all requirements must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parse the string form used in `?labelSelector=`.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(part).ok_or_else(|| {
                ApiError::bad_request(format!("unable to parse requirement: {part:?}"))
            })?);
        }
        Ok(LabelSelector(reqs))
    }

    /// Parse a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`). A missing
    /// selector matches everything.
    pub fn from_object(v: &Value) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in m {
                reqs.push(Requirement::Equals(
                    k.clone(),
                    val.as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        if let Some(exprs) = v.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e["key"].as_str().unwrap_or_default().to_string();
                let values: Vec<String> = e["values"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                reqs.push(match e["operator"].as_str().unwrap_or_default() {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::DoesNotExist(key),
                    other => {
                        return Err(format!("{other:?} is not a valid label selector operator"));
                    }
                });
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }

    /// Whether the object's `metadata.labels` satisfy the selector.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.matches(&labels_of(obj))
    }
}

/// `metadata.labels` of an object.
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn parse_set(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect(),
    )
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_requirement(p: &str) -> Option<Requirement> {
    if let Some(k) = p.strip_prefix('!') {
        let k = k.trim();
        return valid_key(k).then(|| Requirement::DoesNotExist(k.to_string()));
    }
    if let Some((k, v)) = p.split_once("!=") {
        return Some(Requirement::NotEquals(
            k.trim().to_string(),
            v.trim().to_string(),
        ))
        .filter(|_| valid_key(k.trim()));
    }
    if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
        return Some(Requirement::Equals(
            k.trim().to_string(),
            v.trim().to_string(),
        ))
        .filter(|_| valid_key(k.trim()));
    }
    let words: Vec<&str> = p.splitn(3, char::is_whitespace).collect();
    if words.len() >= 2 {
        let key = words[0].to_string();
        let rest = p[words[0].len()..].trim_start();
        if let Some(set) = rest.strip_prefix("notin") {
            return parse_set(set).map(|s| Requirement::NotIn(key, s));
        }
        if let Some(set) = rest.strip_prefix("in") {
            return parse_set(set).map(|s| Requirement::In(key, s));
        }
        return None;
    }
    valid_key(p).then(|| Requirement::Exists(p.to_string()))
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parse the string form used in `?fieldSelector=`.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            out.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the object satisfies every term; missing fields compare as the empty string.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = obj;
            for seg in path.split('.') {
                cur = cur.get(seg).unwrap_or(&Value::Null);
            }
            let got = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (got == *want) == *eq
        })
    }

    /// The value required for `metadata.name`, if the selector pins it.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| *eq && k == "metadata.name")
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier in (front),!missing", true),
            ("missing notin (x)", true),
            ("", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&l),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn label_selector_objects() {
        let s = LabelSelector::from_object(&json!({"matchLabels": {"a": "b"},
            "matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["d"]}]}))
        .unwrap();
        assert!(s.matches(&labels(&[("a", "b")])));
        assert!(!s.matches(&labels(&[("a", "b"), ("c", "d")])));
        assert!(
            LabelSelector::from_object(
                &json!({"matchExpressions": [{"key": "c", "operator": "Bad"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn field_selectors() {
        let obj =
            json!({"metadata": {"name": "x", "namespace": "ns"}, "involvedObject": {"uid": "u"}});
        assert!(
            FieldSelector::parse("metadata.name=x,metadata.namespace==ns")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=x")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("involvedObject.uid=u")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("nonsense").is_err());
        assert_eq!(
            FieldSelector::parse("metadata.name=x")
                .unwrap()
                .pinned_name(),
            Some("x")
        );
    }
}
