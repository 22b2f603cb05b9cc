//! The principal of a client certificate, as Kafka's default principal builder makes it:
//! `User:` and the subject's distinguished name in RFC 2253 form, as Java's
//! `X500Principal.getName()` writes it: the last RDN first, no spaces after the commas,
//! RFC 2253's keywords (CN, L, ST, O, OU, C, STREET, DC, UID) and the dotted OID with the
//! DER value in hex (`1.2.840.113549.1.9.1=#16...`) for any other attribute.

use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;

use crate::security::acl::Principal;

/// Why a client certificate gives no principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the client certificate cannot be read: {0}")]
pub struct PrincipalError(String);

/// `User:CN=alice,OU=eng,O=example` for a certificate whose subject is those RDNs
/// (written O, OU, CN in the certificate).
pub fn principal_of_certificate(der: &[u8]) -> Result<Principal, PrincipalError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| PrincipalError(e.to_string()))?;
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    let name: Vec<&str> = rdns.iter().rev().map(String::as_str).collect();
    Ok(Principal::user(&name.join(",")))
}

/// RFC 2253's keywords, by OID.
const KEYWORDS: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.6", "C"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

fn attribute(attr: &AttributeTypeAndValue<'_>) -> String {
    let oid = attr.attr_type().to_id_string();
    let keyword = KEYWORDS.iter().find(|(o, _)| *o == oid).map(|(_, k)| *k);
    match (keyword, attr.as_str()) {
        (Some(keyword), Ok(value)) => format!("{keyword}={}", escape(value)),
        (keyword, _) => format!("{}=#{}", keyword.unwrap_or(&oid), hex_der(attr)),
    }
}

/// RFC 2253 section 2.4: `,+"\<>;` escaped, and a leading '#' or space or trailing space.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The attribute value's DER encoding (tag, length, contents) in lowercase hex.
fn hex_der(attr: &AttributeTypeAndValue<'_>) -> String {
    let value = attr.attr_value();
    let data = value.data;
    // Universal string types have one-byte tags; DER lengths are short under 128 bytes,
    // else 0x80 | byte count, then the count big-endian.
    let mut der = vec![u8::try_from(value.tag().0).unwrap_or(0)];
    match u8::try_from(data.len()) {
        Ok(len) if len < 0x80 => der.push(len),
        _ => {
            let len = data.len().to_be_bytes();
            let skip = len.iter().take_while(|b| **b == 0).count();
            der.push(0x80 | (len.len() - skip) as u8);
            der.extend_from_slice(&len[skip..]);
        }
    }
    der.extend_from_slice(data);
    der.iter().map(|b| format!("{b:02x}")).collect()
}
