//! The subject of an X.509 certificate: the common name and organizations a
//! client certificate authenticates as (upstream's `x509.CommonNameUserConversion`:
//! CN = user name, O = groups).
//!
//! A minimal DER reader: it walks `Certificate → tbsCertificate → subject`
//! and reads `CN` (2.5.4.3) and `O` (2.5.4.10) attributes. The chain itself
//! is verified by rustls before this runs; malformed input yields an error,
//! never a panic.

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
    /// The DER is truncated or not the expected structure.
    #[error("malformed certificate: {0}")]
    Malformed(&'static str),
}

const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

/// One DER element: tag and contents.
struct Tlv<'a> {
    tag: u8,
    body: &'a [u8],
}

/// Reads one element from the front of `input`; returns it and the rest.
fn read_tlv(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), X509Error> {
    let (&tag, rest) = input.split_first().ok_or(X509Error::Malformed("truncated tag"))?;
    let (&first, mut rest) = rest.split_first().ok_or(X509Error::Malformed("truncated length"))?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(X509Error::Malformed("bad length"));
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = (len << 8) | b as usize;
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(X509Error::Malformed("truncated value"));
    }
    Ok((Tlv { tag, body: &rest[..len] }, &rest[len..]))
}

fn expect<'a>(input: &'a [u8], tag: u8, what: &'static str) -> Result<(Tlv<'a>, &'a [u8]), X509Error> {
    let (t, rest) = read_tlv(input)?;
    if t.tag != tag {
        return Err(X509Error::Malformed(what));
    }
    Ok((t, rest))
}

/// Decodes a directory string (UTF8String, PrintableString, IA5String,
/// TeletexString as Latin-1, BMPString as UCS-2).
fn directory_string(t: &Tlv<'_>) -> String {
    match t.tag {
        0x0c | 0x13 | 0x16 => String::from_utf8_lossy(t.body).into_owned(),
        0x14 => t.body.iter().map(|&b| b as char).collect(),
        0x1e => {
            let units: Vec<u16> = t.body.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16_lossy(&units)
        }
        _ => String::from_utf8_lossy(t.body).into_owned(),
    }
}

/// Reads the subject's CN and O attributes from a DER certificate.
pub fn subject(der: &[u8]) -> Result<Subject, X509Error> {
    let (cert, _) = expect(der, 0x30, "certificate is not a SEQUENCE")?;
    let (tbs, _) = expect(cert.body, 0x30, "tbsCertificate is not a SEQUENCE")?;
    let mut rest = tbs.body;
    // [0] EXPLICIT version, optional.
    let (first, after) = read_tlv(rest)?;
    if first.tag == 0xa0 {
        rest = after;
    }
    let (_serial, r) = expect(rest, 0x02, "serial is not an INTEGER")?;
    let (_sig, r) = expect(r, 0x30, "signature algorithm is not a SEQUENCE")?;
    let (_issuer, r) = expect(r, 0x30, "issuer is not a SEQUENCE")?;
    let (_validity, r) = expect(r, 0x30, "validity is not a SEQUENCE")?;
    let (name, _) = expect(r, 0x30, "subject is not a SEQUENCE")?;
    let mut out = Subject::default();
    let mut rdns = name.body;
    while !rdns.is_empty() {
        let (set, r) = expect(rdns, 0x31, "RDN is not a SET")?;
        rdns = r;
        let mut atvs = set.body;
        while !atvs.is_empty() {
            let (atv, r) = expect(atvs, 0x30, "attribute is not a SEQUENCE")?;
            atvs = r;
            let (oid, r) = expect(atv.body, 0x06, "attribute type is not an OID")?;
            let (value, _) = read_tlv(r)?;
            if oid.body == OID_CN && out.common_name.is_empty() {
                out.common_name = directory_string(&value);
            } else if oid.body == OID_O {
                out.organizations.push(directory_string(&value));
            }
        }
    }
    Ok(out)
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
