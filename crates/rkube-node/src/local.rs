//! A whole node in one process, for `rkube up --node`: `rkube runtime` on a socket under the
//! data directory and the node agent. Pods reach this node through the scheduler
//! (`rkube-scheduler`, which `rkube up` runs in process).

use std::path::{Path, PathBuf};

use crate::agent::{self, AgentHandle, NodeConfig};

/// A running local node.
#[derive(Debug)]
pub struct NodeHandle {
    runtime: rkube_runtime::RuntimeHandle,
    agent: AgentHandle,
    /// The Node's name.
    pub node_name: String,
}

impl NodeHandle {
    /// The agent (metrics, cache, PLEG).
    pub fn agent(&self) -> &AgentHandle {
        &self.agent
    }

    /// The runtime (records, processes).
    pub fn runtime(&self) -> &rkube_runtime::RuntimeHandle {
        &self.runtime
    }

    /// The runtime's CRI endpoint.
    pub fn runtime_endpoint(&self) -> String {
        self.runtime.endpoint()
    }

    /// Stops the agent, then the runtime (killing every container).
    pub async fn shutdown(self) {
        self.agent.shutdown().await;
        self.runtime.shutdown().await;
    }
}

/// A DNS-1123 node name from the host name (`rkube-node` if there is none).
pub fn default_node_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = raw
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches(|c| c == '-' || c == '.').to_string();
    if name.is_empty() {
        "rkube-node".into()
    } else {
        name
    }
}

/// A kube client from a kubeconfig file: every component's client
/// (`rkube_component::client`, which retries an answer with `Retry-After`).
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<kube::Client> {
    rkube_component::client::client(Some(path)).await
}

/// Signs a kubelet serving certificate (`CN=system:node:<node>`, SANs `node`, `localhost`,
/// `127.0.0.1`, valid one year) with the CA of `rkube up` (`<data_dir>/pki/ca.crt`, `ca.key`)
/// into `dir/kubelet-server.crt` and `.key`; returns their paths.
///
/// # Errors
/// The CA cannot be read or the files cannot be written.
pub fn sign_serving_cert(
    data_dir: &Path,
    dir: &Path,
    node: &str,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let ca_pem = std::fs::read_to_string(data_dir.join("pki").join("ca.crt"))?;
    let ca_key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(
        data_dir.join("pki").join("ca.key"),
    )?)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, &ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![
        node.to_string(),
        "localhost".into(),
        "127.0.0.1".into(),
    ])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(365);
    let cert = params.signed_by(&key, &issuer)?;
    std::fs::create_dir_all(dir)?;
    let (cert_path, key_path) = (
        dir.join("kubelet-server.crt"),
        dir.join("kubelet-server.key"),
    );
    std::fs::write(&cert_path, cert.pem())?;
    crate::kubelet_api::tls::write_private(&key_path, &key.serialize_pem())?;
    Ok((cert_path, key_path))
}

/// How long [`run_local_node`] waits for the kubelet API's serving certificate.
const SERVING_CERT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Starts `rkube runtime` (socket `<data_dir>/node/cri.sock`), the node agent (evented PLEG,
/// pod logs under `<data_dir>/node/pods`, healthz on an ephemeral loopback port, InternalIP
/// 127.0.0.1) for the API server of `kubeconfig_path`. The node is named after the host.
///
/// The kubelet API listens on a free loopback port. When the kubeconfig's server is HTTPS and
/// `<data_dir>/pki` holds the CA of `rkube up`, it serves a certificate issued by that CA
/// through a CertificateSigningRequest (`kubernetes.io/kubelet-serving`, approved by this node),
/// trusts that CA for client certificates (the API server's kubelet client certificate),
/// refuses anonymous requests and authorizes by SubjectAccessReview; otherwise (`rkube up
/// --insecure`) it serves a self-signed certificate and allows everyone, as the API server does.
pub async fn run_local_node(
    kubeconfig_path: impl AsRef<Path>,
    data_dir: impl AsRef<Path>,
) -> anyhow::Result<NodeHandle> {
    run_local_node_with(kubeconfig_path, data_dir, |_| {}).await
}

/// [`run_local_node`], with `configure` given the agent's configuration last (log rotation,
/// back-off, resync) before the agent starts.
pub async fn run_local_node_with(
    kubeconfig_path: impl AsRef<Path>,
    data_dir: impl AsRef<Path>,
    configure: impl FnOnce(&mut NodeConfig),
) -> anyhow::Result<NodeHandle> {
    let root: PathBuf = data_dir.as_ref().join("node");
    std::fs::create_dir_all(&root)?;
    let runtime_config = rkube_runtime::RuntimeConfig::new(root.join("runtime"));
    std::fs::create_dir_all(&runtime_config.root_dir)?;
    let runtime = rkube_runtime::serve(&root.join("cri.sock"), runtime_config).await?;
    let client = client_from_kubeconfig(kubeconfig_path.as_ref()).await?;
    let node_name = default_node_name();
    let mut config = NodeConfig::new(node_name.clone(), runtime.endpoint());
    config.node_ip = "127.0.0.1".into();
    config.pod_logs_dir = root.join("pods");
    config.root_dir = root.join("kubelet");
    config.healthz_addr = ([127, 0, 0, 1], 0).into();
    config.kubelet.addr = ([127, 0, 0, 1], 0).into();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig_path.as_ref())?;
    let https = kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref().and_then(|c| c.server.as_deref()))
        .any(|s| s.starts_with("https://"));
    let ca = data_dir.as_ref().join("pki").join("ca.crt");
    let requests_cert =
        https && ca.exists() && data_dir.as_ref().join("pki").join("ca.key").exists();
    if requests_cert {
        // Through a CertificateSigningRequest the API server's signer issues (and this node,
        // holding the admin's credentials, approves).
        config.kubelet.rotate_server_certificates = true;
        config.kubelet.approve_own_serving_csr = true;
        config.kubelet.client_ca_file = Some(ca);
    } else {
        config.kubelet.anonymous_auth = true;
        config.kubelet.authorization_mode =
            crate::kubelet_api::auth::AuthorizationMode::AlwaysAllow;
    }
    configure(&mut config);
    let agent = match agent::start(config, client.clone()).await {
        Ok(a) => a,
        Err(err) => {
            runtime.shutdown().await;
            return Err(err);
        }
    };
    // The API server reaches the kubelet API once its certificate is issued (a second or so).
    if requests_cert && !agent.serving_cert.wait_ready(SERVING_CERT_WAIT).await {
        agent.shutdown().await;
        runtime.shutdown().await;
        anyhow::bail!(
            "the kubelet API's serving certificate was not issued within {SERVING_CERT_WAIT:?}"
        );
    }
    Ok(NodeHandle {
        runtime,
        agent,
        node_name,
    })
}
