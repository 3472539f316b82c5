//! The `clusterTrustBundle` source of a projected volume (KEP-3257; upstream kubelet
//! `pkg/kubelet/clustertrustbundle/clustertrustbundle_manager.go` and the projected volume
//! plugin): the trust anchors of one ClusterTrustBundle picked by `name`, or of every bundle of
//! `signerName` whose labels match `labelSelector`, written to `path` as one PEM file.
//!
//! - The bundles are read from `certificates.k8s.io/v1beta1` through the API server; those of a
//!   signer are listed with the field selector `spec.signerName` and the label selector.
//! - Normalization as kubelet's: the `CERTIFICATE` blocks of every bundle, deduplicated and
//!   ordered by their bytes (kubelet then shuffles that order at random; rkube keeps it, so a
//!   volume is rewritten only when the anchors change), each written as a fresh PEM block.
//! - `labelSelector` unset matches no bundle; set but empty matches every bundle of the signer.
//! - Nothing found: an empty file when `optional`, else an error (kubelet's `FailedMount`).

use k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle;
use k8s_openapi::api::core::v1::ClusterTrustBundleProjection;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams};

/// The file of one `clusterTrustBundle` projection.
///
/// # Errors
/// A read that fails, a missing bundle or no matching bundle when not `optional`, or neither
/// `name` nor `signerName` given.
pub async fn project(client: &kube::Client, source: &ClusterTrustBundleProjection) -> Result<Vec<u8>, String> {
    let optional = source.optional.unwrap_or(false);
    let api: Api<ClusterTrustBundle> = Api::all(client.clone());
    let bundles: Vec<ClusterTrustBundle> = match (&source.name, &source.signer_name) {
        (Some(name), _) => match api.get_opt(name).await.map_err(|e| format!("while getting ClusterTrustBundle {name:?}: {e}"))? {
            Some(b) => vec![b],
            None if optional => return Ok(Vec::new()),
            None => return Err(format!("ClusterTrustBundle {name:?} not found")),
        },
        (None, Some(signer)) => {
            let found = match source.label_selector.as_ref() {
                None => Vec::new(),
                Some(selector) => {
                    let params = ListParams::default().fields(&format!("spec.signerName={signer}")).labels(&selector_string(selector));
                    api.list(&params).await.map_err(|e| format!("while listing ClusterTrustBundles of signer {signer:?}: {e}"))?.items
                }
            };
            let found: Vec<ClusterTrustBundle> = found.into_iter().filter(|b| b.spec.signer_name.as_deref() == Some(signer.as_str())).collect();
            if found.is_empty() {
                if optional {
                    return Ok(Vec::new());
                }
                return Err(format!("combination of signerName {signer:?} and labelSelector matched zero ClusterTrustBundles"));
            }
            found
        }
        (None, None) => return Err(format!("clusterTrustBundle projection for path {:?} names neither a bundle nor a signer", source.path)),
    };
    let texts: Vec<&str> = bundles.iter().map(|b| b.spec.trust_bundle.as_str()).collect();
    Ok(normalize(&texts))
}

/// The anchors of `bundles` (PEM texts) deduplicated, ordered by their DER bytes, each a
/// `CERTIFICATE` block with 64-character lines.
pub fn normalize(bundles: &[&str]) -> Vec<u8> {
    let anchors: std::collections::BTreeSet<Vec<u8>> =
        bundles.iter().flat_map(|b| rkube_api::strategy::trust_bundle::pem_blocks(b)).map(|block| block.der).collect();
    let mut out = String::new();
    for der in anchors {
        let body = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in body.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out.into_bytes()
}

/// A `metav1.LabelSelector` in the label-selector query syntax (`k=v`, `k in (a,b)`,
/// `k notin (a)`, `k`, `!k`); empty for an empty selector (every object).
pub fn selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn block(der: &[u8]) -> String {
        let body = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
        format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
    }

    #[test]
    fn anchors_of_several_bundles_are_deduplicated_and_ordered_by_their_bytes() {
        let (a, b, c) = (block(b"aaa"), block(b"bbb"), block(&[0x7f; 60]));
        let got = String::from_utf8(normalize(&[&format!("{c}junk between\n{a}"), &format!("{a}{b}")])).expect("utf-8");
        let long = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [0x7f; 60]);
        let expected = format!(
            "{a}{b}-----BEGIN CERTIFICATE-----\n{}\n{}\n-----END CERTIFICATE-----\n",
            &long[..64],
            &long[64..]
        );
        assert_eq!(got, expected);
        assert!(normalize(&[]).is_empty());
    }

    #[test]
    fn label_selectors_become_query_strings() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"a": "1"},
            "matchExpressions": [
                {"key": "b", "operator": "In", "values": ["x", "y"]},
                {"key": "c", "operator": "NotIn", "values": ["z"]},
                {"key": "d", "operator": "Exists"},
                {"key": "e", "operator": "DoesNotExist"}
            ]
        }))
        .expect("selector");
        assert_eq!(selector_string(&sel), "a=1,b in (x,y),c notin (z),d,!e");
        assert_eq!(selector_string(&LabelSelector::default()), "");
    }
}
