//! Key → file payloads for configMap, secret and projected volumes
//! (upstream configmap.MakePayload / secret.MakePayload).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::KeyToPath;

use super::atomic_writer::{validate_path, FileProjection, Payload};
use crate::volume::{file_mode, VolumeError};

/// One object's keys as files: every key when `items` is empty, else just
/// the listed ones at their paths. A listed key that is missing is an error
/// unless the source is optional. `what` names the object in errors
/// (`configmap "ns/name"`).
pub fn make_payload(
    items: Option<&[KeyToPath]>,
    data: &BTreeMap<String, Vec<u8>>,
    default_mode: Option<i32>,
    optional: bool,
    what: &str,
) -> Result<Payload, VolumeError> {
    let mut out = Payload::new();
    let items = items.unwrap_or_default();
    if items.is_empty() {
        for (key, value) in data {
            add(&mut out, key, value, file_mode(None, default_mode)?)?;
        }
        return Ok(out);
    }
    for item in items {
        match data.get(&item.key) {
            Some(value) => add(
                &mut out,
                &item.path,
                value,
                file_mode(item.mode, default_mode)?,
            )?,
            None if optional => continue,
            None => {
                return Err(VolumeError::NotFound(format!(
                    "{what}: references non-existent key: {}",
                    item.key
                )))
            }
        }
    }
    Ok(out)
}

fn add(out: &mut Payload, path: &str, value: &[u8], mode: u32) -> Result<(), VolumeError> {
    validate_path(path).map_err(|e| VolumeError::Invalid(e.to_string()))?;
    out.insert(
        path.to_string(),
        FileProjection {
            data: value.to_vec(),
            mode,
            fs_user: None,
        },
    );
    Ok(())
}

/// The payload of one ConfigMap or Secret as a volume source: `found` is
/// the object's data (`Ok(None)` when it does not exist), `kind` names it in
/// errors as upstream does (`configmap "x" not found`).
pub fn object_payload(
    found: Result<Option<BTreeMap<String, Vec<u8>>>, crate::volume::HostError>,
    kind: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, VolumeError> {
    let data = found.map_err(|e| VolumeError::Failed(format!("get {kind} {name}: {e}")))?;
    match data {
        Some(data) => make_payload(
            items,
            &data,
            default_mode,
            optional,
            &format!("{kind} {name:?}"),
        ),
        None if optional => Ok(Payload::new()),
        None => Err(VolumeError::NotFound(format!("{kind} {name:?} not found"))),
    }
}

/// Merges `from` into `into` (projected sources); a later source wins a
/// path clash, as upstream's map assignment does.
pub fn merge(into: &mut Payload, from: Payload) {
    into.extend(from);
}

/// Adds fsGroup's mode bits to every file, so the payload describes the
/// files exactly as they end up on disk.
pub fn apply_fs_group_mask(payload: &mut Payload, fs_group: Option<i64>, read_only: bool) {
    if fs_group.is_some() {
        let mask = super::ownership::file_mask(read_only);
        for file in payload.values_mut() {
            file.mode |= mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ])
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn all_keys_or_items_with_modes() {
        let all = make_payload(None, &data(), Some(0o400), false, "cm").unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all["a"].mode, 0o400);
        let items = [item("b", "dir/bee", Some(0o600))];
        let some = make_payload(Some(&items), &data(), None, false, "cm").unwrap();
        assert_eq!(some.keys().collect::<Vec<_>>(), ["dir/bee"]);
        assert_eq!(some["dir/bee"].mode, 0o600);
        assert_eq!(some["dir/bee"].data, b"2");
    }

    #[test]
    fn missing_keys_and_bad_paths() {
        let items = [item("zzz", "z", None)];
        let err =
            make_payload(Some(&items), &data(), None, false, "configmap \"ns/c\"").unwrap_err();
        assert_eq!(
            err,
            VolumeError::NotFound("configmap \"ns/c\": references non-existent key: zzz".into())
        );
        assert!(make_payload(Some(&items), &data(), None, true, "cm")
            .unwrap()
            .is_empty());
        for bad in ["../x", "/abs", "a/../../b"] {
            let items = [item("a", bad, None)];
            let err = make_payload(Some(&items), &data(), None, false, "cm").unwrap_err();
            assert!(matches!(err, VolumeError::Invalid(_)), "{bad}");
        }
        assert!(make_payload(None, &data(), Some(0o1777), false, "cm").is_err());
    }
}
