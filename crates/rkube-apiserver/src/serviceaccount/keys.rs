//! ServiceAccount token keys: the private key that signs tokens
//! (`--service-account-signing-key-file`), the public keys that verify them
//! (`--service-account-key-file`, repeatable), key IDs and the JSON Web Keys
//! published at `/openid/v1/jwks` (upstream `pkg/serviceaccount/jwt.go`,
//! `pkg/serviceaccount/openidmetadata.go`).
//!
//! rkube signs with ECDSA P-256 (`ES256`), which kube-apiserver also
//! accepts; keys are PEM: a PKCS#8 `PRIVATE KEY`, a `PUBLIC KEY`
//! (SubjectPublicKeyInfo) or a `CERTIFICATE` (its public key is used). RSA
//! keys are refused with an error saying so. A key's ID (`kid`) is the
//! unpadded base64url SHA-256 of its DER SubjectPublicKeyInfo, as upstream
//! computes it, so tokens name the key that verifies them.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{DecodingKey, EncodingKey};
use rustls_pki_types::pem::{PemObject, SectionKind};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1,
/// then the BIT STRING header of a 65-byte uncompressed point).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Errors loading or generating keys.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no usable key, or a key of an unsupported type.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

/// A public key that verifies tokens: its ID, the P-256 point, and the
/// decoding key built from it.
#[derive(Clone)]
pub struct PublicKey {
    /// Key ID: unpadded base64url SHA-256 of the DER SubjectPublicKeyInfo.
    pub kid: String,
    /// The uncompressed point (`0x04 || x || y`, 65 bytes).
    pub point: Vec<u8>,
    /// For `jsonwebtoken::decode`.
    pub decoding: DecodingKey,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

impl PublicKey {
    /// The key of an uncompressed P-256 point (65 bytes starting `0x04`).
    pub fn from_point(point: &[u8]) -> Option<PublicKey> {
        if point.len() != 65 || point[0] != 4 {
            return None;
        }
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(point);
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(&spki));
        let x = URL_SAFE_NO_PAD.encode(&point[1..33]);
        let y = URL_SAFE_NO_PAD.encode(&point[33..65]);
        let decoding = DecodingKey::from_ec_components(&x, &y).ok()?;
        Some(PublicKey { kid, point: point.to_vec(), decoding })
    }

    /// The key of a DER SubjectPublicKeyInfo, when it is a P-256 key.
    pub fn from_spki(spki: &[u8]) -> Option<PublicKey> {
        spki.strip_prefix(&P256_SPKI_PREFIX[..]).and_then(PublicKey::from_point)
    }

    /// The JSON Web Key (RFC 7517) published for this key:
    /// `{"use":"sig","kty":"EC","kid":…,"crv":"P-256","alg":"ES256","x":…,"y":…}`.
    pub fn jwk(&self) -> Value {
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&self.point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&self.point[33..65]),
        })
    }
}

/// The private key tokens are signed with, and its public half.
#[derive(Clone)]
pub struct SigningKey {
    /// For `jsonwebtoken::encode`.
    pub encoding: EncodingKey,
    /// The public half (its `kid` goes in every token's header).
    pub public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.public.kid).finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, KeyError> {
    std::fs::read(path).map_err(|source| KeyError::Io { path: path.display().to_string(), source })
}

fn invalid(path: &Path, message: impl Into<String>) -> KeyError {
    KeyError::Invalid { path: path.display().to_string(), message: message.into() }
}

/// The signing key of the PEM `pem` (a PKCS#8 P-256 private key).
pub fn signing_key_from_pem(pem: &str) -> Result<SigningKey, String> {
    let pair = rcgen::KeyPair::from_pem(pem).map_err(|e| format!("not a PKCS#8 private key: {e}"))?;
    if pair.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
        return Err("only ECDSA P-256 keys (ES256) are supported by rkube".to_string());
    }
    let public = PublicKey::from_point(pair.public_key_raw()).ok_or("the key's public point is not valid")?;
    let encoding = EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).map_err(|e| e.to_string())?;
    Ok(SigningKey { encoding, public })
}

/// Loads `--service-account-signing-key-file`.
pub fn load_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    let bytes = read(path)?;
    let pem = String::from_utf8(bytes).map_err(|_| invalid(path, "not a PEM file"))?;
    signing_key_from_pem(&pem).map_err(|m| invalid(path, m))
}

/// Loads every public key of a `--service-account-key-file`: `PUBLIC KEY`
/// blocks, `CERTIFICATE` blocks and the public half of `PRIVATE KEY`
/// blocks. Errors when the file holds none, or one that is not P-256.
pub fn load_public_keys(path: &Path) -> Result<Vec<PublicKey>, KeyError> {
    let bytes = read(path)?;
    let mut keys = Vec::new();
    for section in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(&bytes) {
        let (kind, der) = section.map_err(|e| invalid(path, format!("reading PEM: {e}")))?;
        let key = match kind {
            SectionKind::PublicKey => PublicKey::from_spki(&der),
            SectionKind::Certificate => spki_of_certificate(&der).and_then(PublicKey::from_spki),
            SectionKind::PrivateKey => {
                let pem = pem_block("PRIVATE KEY", &der);
                signing_key_from_pem(&pem).ok().map(|k| k.public)
            }
            _ => continue,
        };
        keys.push(key.ok_or_else(|| invalid(path, "only ECDSA P-256 keys (ES256) are supported by rkube"))?);
    }
    if keys.is_empty() {
        return Err(invalid(path, "no public key, certificate or private key found"));
    }
    Ok(keys)
}

fn pem_block(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The P-256 SubjectPublicKeyInfo inside a DER certificate, found by its
/// fixed prefix (enough for the keys rkube accepts).
fn spki_of_certificate(der: &[u8]) -> Option<&[u8]> {
    let at = der.windows(P256_SPKI_PREFIX.len()).position(|w| w == P256_SPKI_PREFIX)?;
    der.get(at..at + P256_SPKI_PREFIX.len() + 65)
}

/// The key files `rkube up` uses: `<dir>/sa.key` (private, mode 0600) and
/// `<dir>/sa.pub` (public), as kubeadm names them; generated (ECDSA P-256)
/// when `sa.key` is missing and reused afterwards.
pub fn ensure_key_files(dir: &Path) -> Result<(PathBuf, PathBuf), KeyError> {
    let key = dir.join("sa.key");
    let public = dir.join("sa.pub");
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |source| KeyError::Io { path: p, source }
    };
    if !key.is_file() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let pair = rcgen::KeyPair::generate().map_err(|e| invalid(&key, e.to_string()))?;
        write_private(&key, &pair.serialize_pem()).map_err(io(&key))?;
        std::fs::write(&public, pair.public_key_pem()).map_err(io(&public))?;
    } else if !public.is_file() {
        let signing = load_signing_key(&key)?;
        let spki = [&P256_SPKI_PREFIX[..], &signing.public.point].concat();
        std::fs::write(&public, pem_block("PUBLIC KEY", &spki)).map_err(io(&public))?;
    }
    Ok((key, public))
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_key_files_load_and_agree() {
        let dir = tempfile::tempdir().unwrap();
        let (key, public) = ensure_key_files(dir.path()).unwrap();
        let signing = load_signing_key(&key).unwrap();
        let keys = load_public_keys(&public).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid, signing.public.kid);
        // The private key file verifies too, and reuse keeps the key.
        assert_eq!(load_public_keys(&key).unwrap()[0].kid, signing.public.kid);
        ensure_key_files(dir.path()).unwrap();
        assert_eq!(load_signing_key(&key).unwrap().public.kid, signing.public.kid);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn kid_is_the_base64url_sha256_of_the_spki() {
        use rcgen::PublicKeyData as _;
        let pair = rcgen::KeyPair::generate().unwrap();
        let k = PublicKey::from_spki(&pair.subject_public_key_info()).unwrap();
        assert_eq!(k.kid, URL_SAFE_NO_PAD.encode(Sha256::digest(pair.subject_public_key_info())));
        let jwk = k.jwk();
        assert_eq!((jwk["kty"].as_str(), jwk["crv"].as_str(), jwk["alg"].as_str()), (Some("EC"), Some("P-256"), Some("ES256")));
        assert_eq!(URL_SAFE_NO_PAD.decode(jwk["x"].as_str().unwrap()).unwrap().len(), 32);
    }

    #[test]
    fn files_without_keys_or_with_rsa_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        assert!(load_public_keys(&empty).unwrap_err().to_string().contains("no public key"));
        let rsa = dir.path().join("rsa.pub");
        std::fs::write(&rsa, pem_block("PUBLIC KEY", &[0x30, 0x82, 0x01, 0x22, 0x30, 0x0d])).unwrap();
        assert!(load_public_keys(&rsa).unwrap_err().to_string().contains("only ECDSA P-256"));
        assert!(matches!(load_signing_key(&dir.path().join("missing")), Err(KeyError::Io { .. })));
    }
}
