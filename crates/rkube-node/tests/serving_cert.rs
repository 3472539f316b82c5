//! The kubelet API's serving certificate requested through the certificates API
//! (`--rotate-server-certificates`): against `rkube up` in-process, the node agent creates a
//! CertificateSigningRequest for signer `kubernetes.io/kubelet-serving` and waits; once an admin
//! approves it (here the test, as `kubectl certificate approve` would), the API server's signer
//! issues the certificate, the agent serves it, and the API server reaches the kubelet API
//! through `nodes/proxy`, checking the certificate against the cluster CA.

use crate::common;

use std::time::{Duration, Instant};

use common::apiserver;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use x509_parser::prelude::FromDer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serving_certificate_is_requested_through_a_csr_and_served_once_approved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, client) = apiserver(dir.path()).await;
    let (kubeconfig, data) = (api.kubeconfig.clone(), dir.path().join("api"));
    // The node's own approval is off: someone else must approve.
    let starting = tokio::spawn(async move {
        rkube_node::local::run_local_node_with(&kubeconfig, data, |c| {
            c.kubelet.approve_own_serving_csr = false
        })
        .await
    });

    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    let pending = loop {
        let list = csrs.list(&ListParams::default()).await.expect("list CSRs");
        if let Some(c) = list
            .items
            .into_iter()
            .find(|c| c.spec.signer_name == "kubernetes.io/kubelet-serving")
        {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "no kubelet-serving CSR was created"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let name = pending.metadata.name.clone().expect("name");
    assert!(name.starts_with("csr-"), "{name}");
    assert_eq!(
        pending.spec.usages.as_deref(),
        Some(&["digital signature".to_string(), "server auth".to_string()][..])
    );
    assert!(
        pending
            .status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_none(),
        "not issued before approval"
    );
    // The request names the node in system:nodes, with its addresses.
    let pem = x509_parser::pem::Pem::iter_from_buffer(&pending.spec.request.0)
        .next()
        .expect("PEM")
        .expect("PEM parses");
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .expect("PKCS#10");
    let subject = req.certification_request_info.subject.to_string();
    assert!(
        subject.contains("CN=system:node:") && subject.contains("O=system:nodes"),
        "{subject}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !starting.is_finished(),
        "the node waits for its certificate"
    );

    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "TestApprove", "message": "approved by the test"}]}});
    csrs.patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval))
        .await
        .expect("approve");
    let node = tokio::time::timeout(Duration::from_secs(30), starting)
        .await
        .expect("the node starts once its certificate is issued")
        .expect("join")
        .expect("local node");
    let issued = csrs.get(&name).await.expect("get CSR");
    assert!(
        issued
            .status
            .and_then(|s| s.certificate)
            .is_some_and(|c| !c.0.is_empty()),
        "issued"
    );

    // The API server reaches the kubelet API through nodes/proxy (verifying it against the CA).
    let path = format!("/api/v1/nodes/{}/proxy/healthz", node.node_name);
    let req = http::Request::get(&path).body(Vec::new()).expect("request");
    let text = client
        .request_text(req)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(text, "ok");

    node.shutdown().await;
    drop(api);
}
