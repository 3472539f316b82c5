//! LIST pagination tokens (`continue=`), following
//! `k8s.io/apiserver/pkg/storage/continue.go`.
//!
//! A token is base64 RawURL (URL-safe alphabet, no padding) of the JSON
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>"}`, where `start` is the
//! storage key to resume at, relative to the resource prefix (e.g.
//! `default/pod-7\u0000` for `/registry/pods/default/pod-7\u0000`), and `rv`
//! is the resourceVersion of the list the page belongs to. A negative `rv`
//! asks for a consistent (latest) read; `rv` 0 is invalid.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::field_error::go_quote;
use crate::status::Status;

/// The only token version upstream understands.
pub const CONTINUE_TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// Go's `base64.RawURLEncoding`: no padding, and (not strict) trailing bits allowed.
const RAW_URL: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContinueToken {
    /// resourceVersion of the list being paged (> 0: read at exactly this
    /// revision; < 0: consistent read of the latest state).
    pub resource_version: i64,
    /// Key to start at (inclusive), relative to the resource prefix, without a leading `/`.
    pub start_key: String,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    #[serde(default)]
    v: String,
    #[serde(default)]
    rv: i64,
    #[serde(default)]
    start: String,
}

impl ContinueToken {
    /// The token for the page after the one whose last item had key
    /// `last_key_relative`: it starts at `last_key_relative + "\0"`, the
    /// smallest key after it (as upstream's etcd3 store does).
    pub fn for_next_key(resource_version: i64, last_key_relative: &str) -> ContinueToken {
        let mut start_key = String::with_capacity(last_key_relative.len() + 1);
        start_key.push_str(
            last_key_relative
                .strip_prefix('/')
                .unwrap_or(last_key_relative),
        );
        start_key.push('\u{0}');
        ContinueToken {
            resource_version,
            start_key,
        }
    }

    /// The opaque token string (what goes in a list's `metadata.continue`).
    ///
    /// The JSON is written like Go's `encoding/json` (which also escapes `<`,
    /// `>`, `&`, U+2028 and U+2029), so tokens are byte-identical to upstream's.
    pub fn encode(&self) -> String {
        let wire = Wire {
            v: CONTINUE_TOKEN_VERSION.to_string(),
            rv: self.resource_version,
            start: self.start_key.clone(),
        };
        // Serializing a struct of strings and an integer cannot fail.
        let json = serde_json::to_string(&wire).unwrap_or_default();
        RAW_URL.encode(go_html_escape(&json))
    }

    /// Decodes and checks a token (upstream `storage.DecodeContinue`).
    ///
    /// Errors (all 400 `BadRequest`, message `invalid continue token: ...`):
    /// not base64 RawURL, not JSON, unknown `v`, `rv` 0, empty `start`, or a
    /// `start` that is not a clean path (`..`, `.`, `//`, trailing `/`), which
    /// could range outside the resource prefix. A leading `/` is accepted and
    /// removed, as upstream does.
    pub fn decode(token: &str) -> Result<ContinueToken, Status> {
        let bad = |why: String| Status::bad_request(format!("invalid continue token: {why}"));
        let data = RAW_URL
            .decode(token)
            .map_err(|e| bad(format!("continue key is not valid: {e}")))?;
        let wire: Wire = serde_json::from_slice(&data)
            .map_err(|e| bad(format!("continue key is not valid: {e}")))?;
        if wire.v != CONTINUE_TOKEN_VERSION {
            return Err(bad(format!(
                "continue key is not valid: server does not recognize this encoded version {}",
                go_quote(&wire.v)
            )));
        }
        if wire.rv == 0 {
            return Err(bad(
                "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
            ));
        }
        if wire.start.is_empty() {
            return Err(bad(
                "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
                    .into(),
            ));
        }
        let absolute = if wire.start.starts_with('/') {
            wire.start.clone()
        } else {
            format!("/{}", wire.start)
        };
        if clean_path(&absolute) != absolute {
            return Err(bad(format!("continue key is not valid: {}", wire.start)));
        }
        Ok(ContinueToken {
            resource_version: wire.rv,
            start_key: absolute[1..].to_string(),
        })
    }

    /// True when the token asks for a consistent read of the latest state (`rv < 0`).
    pub fn is_consistent(&self) -> bool {
        self.resource_version < 0
    }
}

/// Escapes what Go's `json.Marshal` escapes beyond serde_json: `<`, `>`, `&`,
/// U+2028, U+2029. These characters can only occur inside JSON strings here.
fn go_html_escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Go's `path.Clean` for absolute paths: collapses `//`, removes `.`
/// elements, resolves `..` (never above `/`), drops a trailing `/`.
fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}
