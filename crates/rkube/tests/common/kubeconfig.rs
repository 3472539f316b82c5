//! Kubeconfigs for tests: reading the one `rkube up` wrote (server URL, CA,
//! admin credentials), writing variants of it for other users (a bearer
//! token, a client certificate), and a minimal HTTP/1.1 GET over plain TCP or
//! TLS (rustls, ring) with those credentials.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_yaml::Value;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

fn unb64(s: &str, what: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| format!("{what}: bad base64: {e}"))?;
    String::from_utf8(bytes).map_err(|e| format!("{what}: not UTF-8: {e}"))
}

/// Who a kubeconfig authenticates as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials at all.
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Token(String),
    /// A client certificate and its key (PEM).
    Cert {
        /// Certificate chain, PEM.
        cert_pem: String,
        /// Private key, PEM.
        key_pem: String,
    },
}

/// The parts of a kubeconfig a test needs (first cluster, first user).
#[derive(Debug, Clone)]
pub struct KubeconfigInfo {
    /// `clusters[0].cluster.server`, e.g. `https://127.0.0.1:6443`.
    pub server: String,
    /// The CA to trust (PEM), when the server is HTTPS.
    pub ca_pem: Option<String>,
    /// The user's credentials.
    pub credentials: Credentials,
}

impl KubeconfigInfo {
    /// Parses a kubeconfig's text.
    pub fn parse(text: &str) -> Result<KubeconfigInfo, String> {
        let v: Value =
            serde_yaml::from_str(text).map_err(|e| format!("kubeconfig is not YAML: {e}"))?;
        let cluster = &v["clusters"][0]["cluster"];
        let server = cluster["server"]
            .as_str()
            .ok_or_else(|| format!("no clusters[0].cluster.server in kubeconfig:\n{text}"))?
            .trim_end_matches('/')
            .to_owned();
        let ca_pem = cluster["certificate-authority-data"]
            .as_str()
            .map(|s| unb64(s, "certificate-authority-data"))
            .transpose()?;
        let user = &v["users"][0]["user"];
        let credentials = match (
            user["token"].as_str(),
            user["client-certificate-data"].as_str(),
            user["client-key-data"].as_str(),
        ) {
            (Some(t), _, _) => Credentials::Token(t.to_owned()),
            (None, Some(c), Some(k)) => Credentials::Cert {
                cert_pem: unb64(c, "client-certificate-data")?,
                key_pem: unb64(k, "client-key-data")?,
            },
            _ => Credentials::None,
        };
        Ok(KubeconfigInfo {
            server,
            ca_pem,
            credentials,
        })
    }

    /// The server's loopback port.
    pub fn port(&self) -> Result<u16, String> {
        self.server
            .strip_prefix("https://127.0.0.1:")
            .or_else(|| self.server.strip_prefix("http://127.0.0.1:"))
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| {
                format!(
                    "kubeconfig server {:?} is not http(s)://127.0.0.1:<port>",
                    self.server
                )
            })
    }

    /// True when the server URL is `https://`.
    pub fn is_https(&self) -> bool {
        self.server.starts_with("https://")
    }

    /// A kubeconfig for the same server (and CA) authenticating with
    /// `credentials`; cluster, user and context named `name`.
    pub fn render(&self, name: &str, credentials: &Credentials) -> String {
        let ca = self
            .ca_pem
            .as_deref()
            .map(|c| format!("    certificate-authority-data: {}\n", b64(c)))
            .unwrap_or_default();
        let user = match credentials {
            Credentials::None => "  user: {}\n".to_owned(),
            Credentials::Token(t) => format!("  user:\n    token: {t}\n"),
            Credentials::Cert { cert_pem, key_pem } => format!(
                "  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert_pem),
                b64(key_pem)
            ),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n{ca}users:\n- name: {name}\n{user}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\ncurrent-context: {name}\n",
            server = self.server
        )
    }

    /// An HTTP client of this server with `credentials` (TLS trusting the CA
    /// when the server is HTTPS).
    pub fn client(&self, credentials: &Credentials) -> Result<HttpClient, String> {
        let port = self.port()?;
        if !self.is_https() {
            return Ok(HttpClient {
                port,
                tls: None,
                token: None,
            });
        }
        let mut roots = rustls::RootCertStore::empty();
        let ca = self
            .ca_pem
            .as_deref()
            .ok_or("HTTPS kubeconfig without certificate-authority-data")?;
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots
                .add(c.map_err(|e| format!("CA PEM: {e}"))?)
                .map_err(|e| format!("CA: {e}"))?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
        let (config, token) = match credentials {
            Credentials::Cert { cert_pem, key_pem } => {
                let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("client certificate PEM: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
                    .map_err(|e| format!("client key PEM: {e}"))?;
                (
                    builder
                        .with_client_auth_cert(certs, key)
                        .map_err(|e| e.to_string())?,
                    None,
                )
            }
            Credentials::Token(t) => (builder.with_no_client_auth(), Some(t.clone())),
            Credentials::None => (builder.with_no_client_auth(), None),
        };
        Ok(HttpClient {
            port,
            tls: Some(Arc::new(config)),
            token,
        })
    }
}

/// Reads and parses the kubeconfig at `path`.
pub fn read(path: &Path) -> Result<KubeconfigInfo, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    KubeconfigInfo::parse(&text)
}

/// A minimal HTTP/1.1 client of one loopback server (one connection per request).
#[derive(Clone)]
pub struct HttpClient {
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    token: Option<String>,
}

impl HttpClient {
    /// A plain-HTTP client of 127.0.0.1:`port` with no credentials.
    pub fn plain(port: u16) -> HttpClient {
        HttpClient {
            port,
            tls: None,
            token: None,
        }
    }

    /// `GET path` with `Connection: close`; returns (status code, body).
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .map_err(|e| format!("connect: {e}"))?;
        tcp.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        tcp.set_write_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let auth = self
            .token
            .as_deref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: */*\r\n{auth}Connection: close\r\n\r\n",
            self.port
        );
        let mut buf = Vec::new();
        match &self.tls {
            None => {
                let mut s = tcp;
                s.write_all(request.as_bytes())
                    .map_err(|e| format!("write: {e}"))?;
                s.read_to_end(&mut buf).map_err(|e| format!("read: {e}"))?;
            }
            Some(cfg) => {
                let name = ServerName::IpAddress(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST).into());
                let conn = rustls::ClientConnection::new(cfg.clone(), name)
                    .map_err(|e| format!("TLS: {e}"))?;
                let mut s = rustls::StreamOwned::new(conn, tcp);
                s.write_all(request.as_bytes())
                    .map_err(|e| format!("TLS write: {e}"))?;
                match s.read_to_end(&mut buf) {
                    Ok(_) => {}
                    // A peer closing without close_notify after the answer.
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof && !buf.is_empty() => {}
                    Err(e) => return Err(format!("TLS read: {e}")),
                }
            }
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text
            .strip_prefix("HTTP/1.")
            .and_then(|t| t.split_whitespace().nth(1))
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| format!("not an HTTP answer: {text:.200}"))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((code, body))
    }
}
