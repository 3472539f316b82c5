//! The subject of an X.509 certificate: the common name and organizations a
//! client certificate authenticates as (upstream's `x509.CommonNameUserConversion`:
//! CN = user name, O = groups).
//!
//! The certificate is parsed by the `x509-parser` crate; this module picks
//! the first `CN` (2.5.4.3) and every `O` (2.5.4.10) of the subject, in
//! order. The chain itself is verified by rustls before this runs;
//! malformed input yields an error, never a panic.

use x509_parser::asn1_rs::Tag;
use x509_parser::x509::AttributeTypeAndValue;

/// The parts of a certificate subject rkube uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    /// The first common name (`CN`), empty when absent.
    pub common_name: String,
    /// Every organization (`O`), in order.
    pub organizations: Vec<String>,
}

/// Errors reading a certificate.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum X509Error {
    /// The DER is truncated or not a certificate (the parser's message).
    #[error("malformed certificate: {0}")]
    Malformed(String),
}

/// Decodes a directory string: UTF8String, PrintableString, IA5String and
/// NumericString as UTF-8, TeletexString as Latin-1, BMPString as UCS-2,
/// UniversalString as UCS-4; other types as lossy UTF-8.
fn directory_string(v: &AttributeTypeAndValue<'_>) -> String {
    if let Ok(s) = v.as_str() {
        return s.to_string();
    }
    let any = v.attr_value();
    let body = any.data;
    match any.tag() {
        Tag::TeletexString => body.iter().map(|&b| b as char).collect(),
        Tag::BmpString => {
            let units: Vec<u16> = body.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16_lossy(&units)
        }
        Tag::UniversalString => body
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
        _ => String::from_utf8_lossy(body).into_owned(),
    }
}

/// Reads the subject's CN and O attributes from a DER certificate.
pub fn subject(der: &[u8]) -> Result<Subject, X509Error> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| X509Error::Malformed(e.to_string()))?;
    let name = cert.subject();
    let common_name = name.iter_common_name().next().map(directory_string).unwrap_or_default();
    let organizations = name.iter_organization().map(directory_string).collect();
    Ok(Subject { common_name, organizations })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(dn: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in dn {
            params.distinguished_name.push(t.clone(), *v);
        }
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn common_name_and_organizations_are_read() {
        let der = cert_with(&[
            (rcgen::DnType::OrganizationName, "system:masters"),
            (rcgen::DnType::CommonName, "rkube-admin"),
        ]);
        let s = subject(&der).unwrap();
        assert_eq!(s.common_name, "rkube-admin");
        assert_eq!(s.organizations, vec!["system:masters".to_string()]);
    }

    #[test]
    fn attribute_order_does_not_matter_and_a_missing_common_name_is_empty() {
        let der = cert_with(&[(rcgen::DnType::CommonName, "alice"), (rcgen::DnType::OrganizationName, "dev")]);
        let s = subject(&der).unwrap();
        assert_eq!((s.common_name.as_str(), s.organizations), ("alice", vec!["dev".to_string()]));
        let none = subject(&cert_with(&[(rcgen::DnType::OrganizationName, "dev")])).unwrap();
        assert_eq!(none.common_name, "", "no CN: empty, and authentication refuses it");
        let bare = subject(&cert_with(&[])).unwrap();
        assert_eq!(bare, Subject::default());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(subject(&[]).is_err());
        assert!(subject(&[0x30, 0x82, 0xff]).is_err());
        assert!(subject(&[0x30, 0x03, 0x02, 0x01, 0x01]).is_err());
        let der = cert_with(&[(rcgen::DnType::CommonName, "x")]);
        for cut in [1, 10, 50, der.len() / 2] {
            let _ = subject(&der[..cut]);
        }
    }
}
