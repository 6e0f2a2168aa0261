//! `sandbox.set_metadata`: one JSON merge patch (`PATCH /sandboxes/{id}/metadata`):
//! the pairs to set as values, the keys to remove as `null`. The server
//! checks keys and values by the same rules as at create (Kubernetes label
//! rules); the provider's own label (crate::sandbox::label) can be neither
//! set nor removed, so that an undo can still find the sandbox by it.

use super::{info, label};
use crate::bindings::exports::abx::epp::infra::SandboxInfo;
use crate::error::{Result, invalid};
use crate::lifecycle::Lifecycle;
use std::collections::BTreeMap;

pub fn set_metadata(
    id: &str,
    metadata: &[(String, String)],
    remove: &[String],
) -> Result<SandboxInfo> {
    let patch = patch(metadata, remove)?;
    info(Lifecycle::new()?.patch_metadata(id, &patch)?, None)
}

/// The merge patch, or E1001 for a key the provider keeps or one both set
/// and removed.
fn patch(
    metadata: &[(String, String)],
    remove: &[String],
) -> Result<BTreeMap<String, Option<String>>> {
    label::check_user_keys(metadata.iter().map(|(k, _)| k.as_str()))?;
    label::check_user_keys(remove.iter().map(String::as_str))?;
    if let Some(key) = remove
        .iter()
        .find(|k| metadata.iter().any(|(m, _)| m == *k))
    {
        return Err(invalid(format!(
            "metadata key `{key}` is both set (`metadata`) and removed (`remove`); keep it in one"
        )));
    }
    Ok(metadata
        .iter()
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .chain(remove.iter().map(|k| (k.clone(), None)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_and_removes_in_one_patch() {
        let set = vec![("team".to_string(), "ml".to_string())];
        let p = patch(&set, &["old".to_string()]).unwrap();
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"team": "ml", "old": null})
        );
        let e = patch(&set, &["team".to_string()]).unwrap_err();
        assert!(e.message.contains("both set"), "{e:?}");
    }

    #[test]
    fn the_providers_label_is_out_of_reach() {
        let own = vec![(label::KEY.to_string(), "x".to_string())];
        let e = patch(&own, &[]).unwrap_err();
        assert!(e.message.contains("`epp-request`"), "{e:?}");
        let e = patch(&[], &[label::KEY.to_string()]).unwrap_err();
        assert!(e.message.contains("`epp-request`"), "{e:?}");
    }
}
