//! The four SCRAM messages (RFC 5802 section 7): parsing what the other side sent, with a
//! size limit and a clear error for each way it can be wrong, and writing our own.

use super::{MESSAGE_BYTES_MAX, ScramError, b64, unb64};
use crate::security::USER_NAME_BYTES_MAX;

/// A client-first message, as the server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// `gs2-cbind-flag "," [authzid] ","`: what the client-final's `c=` must be the base64 of.
    pub(crate) gs2_header: String,
    /// The authorization identity (`a=`), if the client sent one.
    pub authzid: Option<String>,
    /// The user name (`n=`), unescaped.
    pub user: String,
    /// The client's nonce (`r=`).
    pub(crate) nonce: String,
    /// `client-first-message-bare`, part of the AuthMessage both sides sign.
    pub(crate) bare: String,
}

impl ClientFirst {
    const NAME: &'static str = "client-first message";

    /// Parses a client-first message. Channel binding (`p=`) and mandatory extensions
    /// (`m=`) are refused; optional extensions after the nonce are ignored.
    pub fn parse(bytes: &[u8]) -> Result<ClientFirst, ScramError> {
        let text = text(bytes, Self::NAME)?;
        let mut parts = text.splitn(3, ',');
        let (flag, authzid, bare) = match (parts.next(), parts.next(), parts.next()) {
            (Some(flag), Some(authzid), Some(bare)) => (flag, authzid, bare),
            _ => return Err(malformed(Self::NAME, "no gs2 header (expected \"n,,\")")),
        };
        match flag {
            "n" | "y" => {}
            p if p.starts_with("p=") => {
                return Err(ScramError::ChannelBindingUnsupported {
                    flag: p.to_string(),
                });
            }
            other => {
                return Err(malformed(
                    Self::NAME,
                    format!("gs2 flag {other:?} is not n, y or p=..."),
                ));
            }
        }
        let authzid = match authzid {
            "" => None,
            a => match a.strip_prefix("a=") {
                Some(name) => Some(decode_saslname(name)?),
                None => return Err(malformed(Self::NAME, "the authzid does not start a=")),
            },
        };
        let mut fields = bare.split(',');
        if bare.starts_with("m=") {
            return Err(malformed(
                Self::NAME,
                "mandatory extensions (m=) are not supported",
            ));
        }
        let user = decode_saslname(attribute(fields.next(), 'n', Self::NAME)?)?;
        let nonce = attribute(fields.next(), 'r', Self::NAME)?;
        check_nonce(nonce, Self::NAME)?;
        fields.try_for_each(|ext| check_extension(ext, Self::NAME))?;
        Ok(ClientFirst {
            gs2_header: text[..text.len() - bare.len()].to_string(),
            authzid,
            user,
            nonce: nonce.to_string(),
            bare: bare.to_string(),
        })
    }
}

/// A client-first message from `user` with `nonce` (no authzid, no channel binding).
pub(crate) fn client_first(user: &str, nonce: &str) -> String {
    format!("n,,n={},r={nonce}", encode_saslname(user))
}

/// A server-first message, as the client reads it.
#[derive(Debug)]
pub(crate) struct ServerFirst {
    pub nonce: String,
    pub salt: Vec<u8>,
    pub iterations: u32,
}

impl ServerFirst {
    const NAME: &'static str = "server-first message";

    pub fn parse(bytes: &[u8]) -> Result<(ServerFirst, &str), ScramError> {
        let text = text(bytes, Self::NAME)?;
        if text.starts_with("m=") {
            return Err(malformed(
                Self::NAME,
                "mandatory extensions (m=) are not supported",
            ));
        }
        let mut fields = text.split(',');
        let nonce = attribute(fields.next(), 'r', Self::NAME)?;
        check_nonce(nonce, Self::NAME)?;
        let salt = unb64(
            attribute(fields.next(), 's', Self::NAME)?,
            Self::NAME,
            "the salt",
        )?;
        let iterations = attribute(fields.next(), 'i', Self::NAME)?;
        let iterations = iterations
            .parse::<u32>()
            .map_err(|e| malformed(Self::NAME, format!("iterations {iterations:?}: {e}")))?;
        fields.try_for_each(|ext| check_extension(ext, Self::NAME))?;
        let first = ServerFirst {
            nonce: nonce.to_string(),
            salt,
            iterations,
        };
        Ok((first, text))
    }

    pub fn encode(nonce: &str, salt: &[u8], iterations: u32) -> String {
        format!("r={nonce},s={},i={iterations}", b64(salt))
    }
}

/// A client-final message, as the server reads it.
#[derive(Debug)]
pub(crate) struct ClientFinal<'a> {
    /// `c=`, still in base64.
    pub channel_binding: &'a str,
    pub nonce: &'a str,
    pub proof: Vec<u8>,
    /// `client-final-message-without-proof`, part of the AuthMessage.
    pub without_proof: &'a str,
}

impl<'a> ClientFinal<'a> {
    const NAME: &'static str = "client-final message";

    pub fn parse(bytes: &'a [u8]) -> Result<ClientFinal<'a>, ScramError> {
        let text = text(bytes, Self::NAME)?;
        let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
            return Err(malformed(Self::NAME, "no proof (p=) at its end"));
        };
        let mut fields = without_proof.split(',');
        let channel_binding = attribute(fields.next(), 'c', Self::NAME)?;
        let nonce = attribute(fields.next(), 'r', Self::NAME)?;
        fields.try_for_each(|ext| check_extension(ext, Self::NAME))?;
        Ok(ClientFinal {
            channel_binding,
            nonce,
            proof: unb64(proof, Self::NAME, "the proof")?,
            without_proof,
        })
    }
}

/// A server-final message, as the client reads it.
pub(crate) enum ServerFinal {
    Verifier(Vec<u8>),
    Error(String),
}

impl ServerFinal {
    const NAME: &'static str = "server-final message";

    pub fn parse(bytes: &[u8]) -> Result<ServerFinal, ScramError> {
        let text = text(bytes, Self::NAME)?;
        // Extensions may follow the verifier or the error; neither is used.
        let first = text.split(',').next().unwrap_or_default();
        if let Some(error) = first.strip_prefix("e=") {
            return Ok(ServerFinal::Error(error.to_string()));
        }
        let verifier = attribute(Some(first), 'v', Self::NAME)?;
        Ok(ServerFinal::Verifier(unb64(
            verifier,
            Self::NAME,
            "the verifier",
        )?))
    }
}

/// `bytes` as UTF-8 text of at most [`MESSAGE_BYTES_MAX`] bytes.
fn text<'a>(bytes: &'a [u8], message: &'static str) -> Result<&'a str, ScramError> {
    if bytes.len() > MESSAGE_BYTES_MAX {
        return Err(ScramError::TooLong {
            message,
            len: bytes.len(),
            max: MESSAGE_BYTES_MAX,
        });
    }
    std::str::from_utf8(bytes).map_err(|_| ScramError::NotUtf8 { message })
}

/// The value of `field`, which must be `key=value`.
fn attribute<'a>(
    field: Option<&'a str>,
    key: char,
    message: &'static str,
) -> Result<&'a str, ScramError> {
    let field = field.ok_or_else(|| malformed(message, format!("no {key}= attribute")))?;
    field
        .strip_prefix(key)
        .and_then(|rest| rest.strip_prefix('='))
        .ok_or_else(|| malformed(message, format!("expected {key}=..., found {field:?}")))
}

/// An optional extension: `x=value` with `x` a letter.
fn check_extension(field: &str, message: &'static str) -> Result<(), ScramError> {
    let mut chars = field.chars();
    match (chars.next(), chars.next()) {
        (Some(c), Some('=')) if c.is_ascii_alphabetic() => Ok(()),
        _ => Err(malformed(
            message,
            format!("unexpected attribute {field:?}"),
        )),
    }
}

/// A nonce is printable ASCII other than ',' (RFC 5802's `printable`), and not empty.
fn check_nonce(nonce: &str, message: &'static str) -> Result<(), ScramError> {
    if nonce.is_empty() {
        return Err(malformed(message, "the nonce is empty"));
    }
    match nonce
        .bytes()
        .find(|b| !(0x21..=0x7e).contains(b) || *b == b',')
    {
        Some(b) => Err(malformed(
            message,
            format!("the nonce holds the byte {b:#04x}, not printable"),
        )),
        None => Ok(()),
    }
}

/// A SASLname unescaped: `=2C` is ',', `=3D` is '=', any other '=' is an error.
pub(crate) fn decode_saslname(name: &str) -> Result<String, ScramError> {
    let bad = |why: String| ScramError::BadName { why };
    if name.is_empty() {
        return Err(bad("it is empty".to_string()));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        out.push(match escape {
            Some("=2C") => ',',
            Some("=3D") => '=',
            _ => return Err(bad(format!("'=' must start =2C or =3D in {name:?}"))),
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    if out.len() > USER_NAME_BYTES_MAX {
        return Err(bad(format!(
            "{} bytes, over the limit of {USER_NAME_BYTES_MAX}",
            out.len()
        )));
    }
    Ok(out)
}

/// A user name escaped as a SASLname.
pub(crate) fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn malformed(message: &'static str, why: impl Into<String>) -> ScramError {
    ScramError::Malformed {
        message,
        why: why.into(),
    }
}
