//! A protobuf client for the tests, independent of rkube's own codec: the
//! `k8s-pb` crate's prost types (generated from Kubernetes' `.proto` files)
//! decode what the server writes and encode what the test sends, as
//! client-go's typed clients do with `application/vnd.kubernetes.protobuf`.

#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;
use k8s_pb::api as a;
use k8s_pb::api::admissionregistration::v1 as admissionregistration_v1;
use k8s_pb::api::apps::v1 as apps_v1;
use k8s_pb::api::autoscaling::v1 as autoscaling_v1;
use k8s_pb::api::autoscaling::v2 as autoscaling_v2;
use k8s_pb::api::batch::v1 as batch_v1;
use k8s_pb::api::certificates::v1 as certificates_v1;
use k8s_pb::api::certificates::v1beta1 as certificates_v1beta1;
use k8s_pb::api::coordination::v1 as coordination_v1;
use k8s_pb::api::core::v1 as core_v1;
use k8s_pb::api::discovery::v1 as discovery_v1;
use k8s_pb::api::events::v1 as events_v1;
use k8s_pb::api::flowcontrol::v1 as flowcontrol_v1;
use k8s_pb::api::networking::v1 as networking_v1;
use k8s_pb::api::node::v1 as node_v1;
use k8s_pb::api::policy::v1 as policy_v1;
use k8s_pb::api::rbac::v1 as rbac_v1;
use k8s_pb::api::scheduling::v1 as scheduling_v1;
use k8s_pb::api::storage::v1 as storage_v1;
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions_v1;
use k8s_pb::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration_v1;
use prost::Message;
use serde_json::Value;

/// The protobuf media type; client-go sends `Accept: <this>, application/json`.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// What client-go's protobuf clients send as `Accept`.
pub const CLIENT_GO_ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";

/// Decodes `raw` as the prost type of `(api_version, kind)` and encodes it
/// again with prost: `None` when the kind has no prost type here, `Some(Err)`
/// when prost cannot decode it.
fn prost_reencode(api_version: &str, kind: &str, raw: &[u8]) -> Option<Result<Vec<u8>, prost::DecodeError>> {
    fn re<M: Message + Default>(raw: &[u8]) -> Result<Vec<u8>, prost::DecodeError> {
        M::decode(raw).map(|m| m.encode_to_vec())
    }
    macro_rules! kinds {
        ($($av:literal: $($kind:ident $list:ident),* in $m:ident;)*) => {
            match (api_version, kind) {
                $($(
                    ($av, stringify!($kind)) => Some(re::<$m::$kind>(raw)),
                    ($av, stringify!($list)) => Some(re::<$m::$list>(raw)),
                )*)*
                ("autoscaling/v1", "Scale") => Some(re::<a::autoscaling::v1::Scale>(raw)),
                ("v1", "Status") => Some(re::<k8s_pb::apimachinery::pkg::apis::meta::v1::Status>(raw)),
                _ => None,
            }
        };
    }
    kinds! {
        "v1": ComponentStatus ComponentStatusList, ConfigMap ConfigMapList, Endpoints EndpointsList,
            Event EventList, LimitRange LimitRangeList, Namespace NamespaceList, Node NodeList,
            PersistentVolumeClaim PersistentVolumeClaimList, PersistentVolume PersistentVolumeList,
            Pod PodList, PodTemplate PodTemplateList, ReplicationController ReplicationControllerList,
            ResourceQuota ResourceQuotaList, Secret SecretList, ServiceAccount ServiceAccountList,
            Service ServiceList in core_v1;
        "admissionregistration.k8s.io/v1": MutatingWebhookConfiguration MutatingWebhookConfigurationList,
            ValidatingAdmissionPolicy ValidatingAdmissionPolicyList,
            ValidatingAdmissionPolicyBinding ValidatingAdmissionPolicyBindingList,
            ValidatingWebhookConfiguration ValidatingWebhookConfigurationList in admissionregistration_v1;
        "apiregistration.k8s.io/v1": APIService APIServiceList in apiregistration_v1;
        "apiextensions.k8s.io/v1": CustomResourceDefinition CustomResourceDefinitionList in apiextensions_v1;
        "apps/v1": ControllerRevision ControllerRevisionList, DaemonSet DaemonSetList, Deployment DeploymentList,
            ReplicaSet ReplicaSetList, StatefulSet StatefulSetList in apps_v1;
        "autoscaling/v2": HorizontalPodAutoscaler HorizontalPodAutoscalerList in autoscaling_v2;
        "autoscaling/v1": HorizontalPodAutoscaler HorizontalPodAutoscalerList in autoscaling_v1;
        "batch/v1": CronJob CronJobList, Job JobList in batch_v1;
        "certificates.k8s.io/v1": CertificateSigningRequest CertificateSigningRequestList in certificates_v1;
        "certificates.k8s.io/v1beta1": ClusterTrustBundle ClusterTrustBundleList in certificates_v1beta1;
        "coordination.k8s.io/v1": Lease LeaseList in coordination_v1;
        "discovery.k8s.io/v1": EndpointSlice EndpointSliceList in discovery_v1;
        "events.k8s.io/v1": Event EventList in events_v1;
        "flowcontrol.apiserver.k8s.io/v1": FlowSchema FlowSchemaList,
            PriorityLevelConfiguration PriorityLevelConfigurationList in flowcontrol_v1;
        "networking.k8s.io/v1": IngressClass IngressClassList, Ingress IngressList, IPAddress IPAddressList,
            NetworkPolicy NetworkPolicyList, ServiceCIDR ServiceCIDRList in networking_v1;
        "node.k8s.io/v1": RuntimeClass RuntimeClassList in node_v1;
        "policy/v1": PodDisruptionBudget PodDisruptionBudgetList in policy_v1;
        "rbac.authorization.k8s.io/v1": ClusterRoleBinding ClusterRoleBindingList, ClusterRole ClusterRoleList,
            RoleBinding RoleBindingList, Role RoleList in rbac_v1;
        "scheduling.k8s.io/v1": PriorityClass PriorityClassList in scheduling_v1;
        "storage.k8s.io/v1": CSIDriver CSIDriverList, CSINode CSINodeList, CSIStorageCapacity CSIStorageCapacityList,
            StorageClass StorageClassList, VolumeAttachment VolumeAttachmentList in storage_v1;
    }
}

/// Opens a `k8s\0` + `runtime.Unknown` body with prost: `(apiVersion, kind, raw)`.
pub fn open(body: &[u8]) -> (String, String, Vec<u8>) {
    let rest = body.strip_prefix(b"k8s\0".as_slice()).unwrap_or_else(|| panic!("no protobuf magic: {body:?}"));
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest).expect("runtime.Unknown");
    let tm = unknown.type_meta.unwrap_or_default();
    (tm.api_version.unwrap_or_default(), tm.kind.unwrap_or_default(), unknown.raw.unwrap_or_default())
}

/// A whole protobuf body as JSON, read the independent way: prost decodes
/// the message as its Kubernetes type and encodes it again, and only then is
/// it turned into JSON (by rkube's decoder). A field the server wrote under
/// the wrong number or type is lost or refused by prost, so the JSON differs.
pub fn to_json(body: &[u8]) -> Value {
    let (api_version, kind, raw) = open(body);
    let again = prost_reencode(&api_version, &kind, &raw)
        .unwrap_or_else(|| panic!("no prost type for {api_version} {kind}: add it to pb_support"))
        .unwrap_or_else(|e| panic!("prost cannot decode {api_version} {kind}: {e}"));
    let k8s = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version),
            kind: Some(kind),
        }),
        raw: Some(again),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut bytes = b"k8s\0".to_vec();
    bytes.extend(k8s.encode_to_vec());
    rkube_api::protobuf::decode_object(&bytes).expect("rkube decodes prost's bytes")
}

/// A JSON object as a protobuf request body made by prost (rkube's encoder
/// gives the bytes prost reads; prost's own encoding is what is sent).
pub fn body_of(obj: &Value) -> Vec<u8> {
    let ours = rkube_api::protobuf::encode_object(obj).expect("encodable");
    let (api_version, kind, raw) = open(&ours);
    let again = prost_reencode(&api_version, &kind, &raw).expect("prost type").expect("prost decodes");
    rkube_api::protobuf::envelope(&api_version, &kind, &again)
}

/// The JSON a protobuf round trip can give back: protobuf cannot tell an
/// empty string, `generation: 0` or an empty list from an absent field (Go
/// omits the first two from JSON too, and reads the last as nil).
pub fn go_json(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| {
                    !(v.as_str() == Some("")
                        || v.as_array().is_some_and(Vec::is_empty)
                        || (k.as_str() == "generation" && v == &&Value::from(0)))
                })
                .map(|(k, v)| (k.clone(), go_json(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(go_json).collect()),
        other => other.clone(),
    }
}

/// A response's status, content type and raw body.
pub struct Raw {
    /// HTTP status.
    pub code: u16,
    /// `Content-Type`.
    pub content_type: String,
    /// The body's bytes.
    pub body: Vec<u8>,
}

/// Sends a request with client-go's protobuf `Accept` (and a protobuf body if given).
pub async fn send(client: &reqwest::Client, method: &str, url: &str, body: Option<Vec<u8>>) -> Raw {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client.request(m, url).header("accept", CLIENT_GO_ACCEPT);
    if let Some(b) = body {
        req = req.header("content-type", PROTOBUF).body(b);
    }
    let resp = req.send().await.expect("request");
    let code = resp.status().as_u16();
    let content_type =
        resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body = resp.bytes().await.expect("body").to_vec();
    Raw { code, content_type, body }
}

/// Reads length-delimited protobuf watch frames.
pub struct Frames {
    /// HTTP status.
    pub code: u16,
    /// `Content-Type`.
    pub content_type: String,
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
}

impl Frames {
    /// Opens a watch at `url` asking for protobuf.
    pub async fn open(url: &str) -> Frames {
        let client = reqwest::Client::builder().build().expect("client");
        let resp = client.get(url).header("accept", CLIENT_GO_ACCEPT).send().await.expect("watch");
        let code = resp.status().as_u16();
        let content_type =
            resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        Frames { code, content_type, stream: resp.bytes_stream().boxed(), buf: Vec::new() }
    }

    /// The next event as `(type, object as JSON read through prost)`, or
    /// `None` if none comes within `secs` or the stream ends.
    pub async fn next_within(&mut self, secs: u64) -> Option<(String, Value)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
                if self.buf.len() >= 4 + len {
                    let frame: Vec<u8> = self.buf.drain(..4 + len).skip(4).collect();
                    let ev = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(frame.as_slice())
                        .expect("WatchEvent");
                    let raw = ev.object.and_then(|o| o.raw).unwrap_or_default();
                    return Some((ev.r#type.unwrap_or_default(), to_json(&raw)));
                }
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }
}
