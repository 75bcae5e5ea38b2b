//! Decoding of `application/vnd.kubernetes.protobuf` request bodies for the few built-in kinds
//! kubectl's typed generators send that way (`kubectl create configmap|secret|namespace|
//! serviceaccount`). Responses are always JSON, which those clients accept. Other kinds answer
//! 415 Unsupported Media Type.

use base64::Engine;
use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

/// One protobuf field: number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err("varint too long".into())
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (num, wire) = (key >> 3, key & 7);
        let f = match wire {
            0 => Field::Varint(varint(buf, &mut pos)?),
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).map_err(|e| e.to_string())?;
                let end = pos
                    .checked_add(len)
                    .filter(|e| *e <= buf.len())
                    .ok_or("truncated field")?;
                let b = &buf[pos..end];
                pos = end;
                Field::Bytes(b)
            }
            1 => {
                pos += 8;
                continue;
            }
            5 => {
                pos += 4;
                continue;
            }
            w => return Err(format!("unsupported wire type {w}")),
        };
        out.push((num, f));
    }
    Ok(out)
}

fn string(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| e.to_string())
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), String> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (n, f) in fields(b)? {
        if let Field::Bytes(b) = f {
            match n {
                1 => key = string(b)?,
                2 if bytes_value => {
                    value = json!(base64::engine::general_purpose::STANDARD.encode(b))
                }
                2 => value = json!(string(b)?),
                _ => {}
            }
        }
    }
    Ok((key, value))
}

fn insert_entry(m: &mut Map<String, Value>, field: &str, entry: (String, Value)) {
    let target = m.entry(field).or_insert_with(|| json!({}));
    if let Some(t) = target.as_object_mut() {
        t.insert(entry.0, entry.1);
    }
}

fn object_meta(b: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1..=3 | 6, Field::Bytes(b)) if !b.is_empty() => {
                let key = match n {
                    1 => "name",
                    2 => "generateName",
                    3 => "namespace",
                    _ => "resourceVersion",
                };
                m.insert(key.into(), json!(string(b)?));
            }
            (11, Field::Bytes(b)) => insert_entry(&mut m, "labels", map_entry(b, false)?),
            (12, Field::Bytes(b)) => insert_entry(&mut m, "annotations", map_entry(b, false)?),
            (14, Field::Bytes(b)) => {
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(string(b)?));
                }
            }
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

fn strings_of(b: &[u8], field: u64) -> Result<Vec<String>, String> {
    fields(b)?
        .into_iter()
        .filter_map(|(n, f)| match f {
            Field::Bytes(b) if n == field => Some(string(b)),
            _ => None,
        })
        .collect()
}

/// Decode a protobuf-encoded object of `kind` into its JSON form.
pub fn decode(body: &[u8], api_version: &str, kind: &str) -> Result<Value, String> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or("missing protobuf envelope")?;
    let mut raw: &[u8] = &[];
    for (n, f) in fields(rest)? {
        if let (2, Field::Bytes(b)) = (n, f) {
            raw = b;
        }
    }
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    for (n, f) in fields(raw)? {
        match (kind, n, f) {
            (_, 1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            ("ConfigMap", 2, Field::Bytes(b)) => {
                insert_entry(&mut obj, "data", map_entry(b, false)?)
            }
            ("ConfigMap", 3, Field::Bytes(b)) => {
                insert_entry(&mut obj, "binaryData", map_entry(b, true)?)
            }
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                obj.insert("immutable".into(), json!(v != 0));
            }
            ("Secret", 2, Field::Bytes(b)) => insert_entry(&mut obj, "data", map_entry(b, true)?),
            ("Secret", 3, Field::Bytes(b)) if !b.is_empty() => {
                obj.insert("type".into(), json!(string(b)?));
            }
            ("Secret", 4, Field::Bytes(b)) => {
                insert_entry(&mut obj, "stringData", map_entry(b, false)?)
            }
            ("Namespace", 2, Field::Bytes(b)) => {
                obj.insert("spec".into(), json!({"finalizers": strings_of(b, 1)?}));
            }
            ("ServiceAccount", 3, Field::Bytes(b)) => {
                let list = obj.entry("imagePullSecrets").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(
                        json!({"name": strings_of(b, 1)?.into_iter().next().unwrap_or_default()}),
                    );
                }
            }
            ("ServiceAccount", 4, Field::Varint(v)) => {
                obj.insert("automountServiceAccountToken".into(), json!(v != 0));
            }
            _ => {}
        }
    }
    Ok(Value::Object(obj))
}

/// Whether protobuf bodies of `kind` can be decoded.
pub fn supported(kind: &str) -> bool {
    matches!(
        kind,
        "ConfigMap" | "Secret" | "Namespace" | "ServiceAccount"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((n << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_configmap() {
        let meta = [
            field(1, b"foo"),
            field(
                11,
                &[field(1, b"app").as_slice(), field(2, b"x").as_slice()].concat(),
            ),
        ]
        .concat();
        let data = [field(1, b"a"), field(2, b"b")].concat();
        let raw = [field(1, &meta), field(2, &data)].concat();
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let v = decode(&body, "v1", "ConfigMap").unwrap();
        assert_eq!(v["metadata"]["name"], "foo");
        assert_eq!(v["metadata"]["labels"]["app"], "x");
        assert_eq!(v["data"]["a"], "b");
        assert!(decode(b"nope", "v1", "ConfigMap").is_err());
        assert!(decode(&[MAGIC, &[0x12, 0x50]].concat(), "v1", "ConfigMap").is_err());
    }
}
