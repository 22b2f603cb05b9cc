//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), sans-IO: the messages go in and
//! out as bytes, the caller owns the socket (Kafka's SaslAuthenticate, the native protocol's
//! own exchange) and the user lookup.
//!
//! - [`ScramCredential`]: what is stored per user and mechanism: salt, iterations,
//!   StoredKey, ServerKey. The password is never kept; StoredKey proves a client's
//!   proof without letting whoever reads the file log in (it is a hash of the ClientKey).
//! - [`server::ServerExchange`]: client-first in, server-first out, client-final in,
//!   server-final out. An unknown user gets a salt derived from a server secret and the name
//!   (the same at every attempt), and fails exactly like a wrong password.
//! - [`client::ScramClient`]: the other side, for the Rust client and the CLI.
//!
//! Passwords are used as their UTF-8 bytes, without SASLprep, as Kafka does, so that
//! credentials made by Kafka's tools and by pagurus agree.

pub mod client;
mod message;
pub mod server;

pub use message::ClientFirst;
#[cfg(test)]
mod tests;

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// Largest SCRAM message accepted from the other side, in bytes. The longest legitimate one
/// (a client-first with a 255-byte name, each byte escaped, and a long nonce) is well under.
pub const MESSAGE_BYTES_MAX: usize = 4096;
/// Fewest PBKDF2 iterations a credential may have (RFC 7677's minimum, Kafka's too).
pub const ITERATIONS_MIN: u32 = 4096;
/// Most PBKDF2 iterations a credential may have: Kafka's limit. A client refuses a server
/// that asks for more, so a hostile server cannot make it spin.
pub const ITERATIONS_MAX: u32 = 16384;
/// Iterations of the credentials pagurus makes (what Kafka's tools make by default).
pub const ITERATIONS_DEFAULT: u32 = 4096;
/// Bytes of random salt in the credentials pagurus makes.
pub const SALT_BYTES: usize = 24;
/// Longest salt accepted (stored, or sent by a server to the client).
pub const SALT_BYTES_MAX: usize = 256;
/// Random bytes in a nonce, before base64.
const NONCE_RANDOM_BYTES: usize = 24;

/// The two SCRAM mechanisms, as SASL names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha256, Mechanism::ScramSha512];

    /// The SASL mechanism name (`SCRAM-SHA-256`).
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of a SASL name; `None` for any other.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Bytes of the hash, and so of every key.
    pub fn key_len(self) -> usize {
        match self {
            Mechanism::ScramSha256 => 32,
            Mechanism::ScramSha512 => 64,
        }
    }

    /// HMAC(key, parts concatenated).
    pub(crate) fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => mac::<Hmac<Sha256>>(key, parts),
            Mechanism::ScramSha512 => mac::<Hmac<Sha512>>(key, parts),
        }
    }

    /// H(data).
    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => Sha256::digest(data).to_vec(),
            Mechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// Hi(password, salt, iterations): PBKDF2 with this mechanism's HMAC.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.key_len()];
        match self {
            Mechanism::ScramSha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            Mechanism::ScramSha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }

    /// ClientKey = HMAC(SaltedPassword, "Client Key").
    fn client_key(self, salted: &[u8]) -> Vec<u8> {
        self.hmac(salted, &[b"Client Key"])
    }

    /// ServerKey = HMAC(SaltedPassword, "Server Key").
    fn server_key(self, salted: &[u8]) -> Vec<u8> {
        self.hmac(salted, &[b"Server Key"])
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn mac<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// Why a SCRAM (or PLAIN) exchange or credential is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("the {message} is {len} bytes, over the limit of {max}")]
    TooLong {
        message: &'static str,
        len: usize,
        max: usize,
    },
    #[error("the {message} is not UTF-8")]
    NotUtf8 { message: &'static str },
    #[error("the {message} is malformed: {why}")]
    Malformed { message: &'static str, why: String },
    #[error(
        "the client asks for channel binding ({flag}), which this server does not support; use the gs2 flag 'n'"
    )]
    ChannelBindingUnsupported { flag: String },
    #[error("the user name is not a valid SASLname: {why}")]
    BadName { why: String },
    #[error("the authorization id {authzid:?} differs from the user name {user:?}")]
    AuthzidMismatch { authzid: String, user: String },
    #[error("the client-final nonce is not the one of this exchange")]
    NonceMismatch,
    #[error("the client-final channel binding is not the client-first gs2 header")]
    ChannelBindingMismatch,
    /// A wrong password and an unknown user both end here, with nothing telling them apart.
    #[error("authentication failed: invalid credentials")]
    AuthenticationFailed,
    #[error("the server's signature does not verify: it does not know this password")]
    ServerSignature,
    #[error("the server refused the exchange: {0}")]
    ServerError(String),
    #[error("{iterations} iterations is outside {ITERATIONS_MIN}..={ITERATIONS_MAX}")]
    Iterations { iterations: u32 },
    #[error("a salt of {len} bytes is outside 1..={SALT_BYTES_MAX}")]
    SaltLength { len: usize },
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

/// The stored form of one user's password for one mechanism (RFC 5802 section 3).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub mechanism: Mechanism,
    pub salt: Vec<u8>,
    pub iterations: u32,
    /// H(ClientKey): checks a client's proof; cannot make one.
    pub stored_key: Vec<u8>,
    /// Signs the server-final message, proving the server knew the credential.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    // Keys are secrets (ServerKey lets its holder pose as the server): never in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential of `password` with a fresh random salt.
    pub fn generate(
        mechanism: Mechanism,
        password: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, ScramError> {
        let mut salt = vec![0; SALT_BYTES];
        random(&mut salt)?;
        ScramCredential::derive(mechanism, password, &salt, iterations)
    }

    /// The credential of `password` with `salt`.
    pub fn derive(
        mechanism: Mechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, ScramError> {
        check_salt_and_iterations(salt, iterations)?;
        let salted = mechanism.salted_password(password, salt, iterations);
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&mechanism.client_key(&salted)),
            server_key: mechanism.server_key(&salted),
        })
    }

    /// The credential of a client-computed SaltedPassword (Kafka's AlterUserScramCredentials
    /// upsertion: the client runs PBKDF2, so the password never reaches the broker). Only
    /// StoredKey and ServerKey are kept; the salted password itself would log a client in.
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, ScramError> {
        check_salt_and_iterations(salt, iterations)?;
        if salted_password.len() != mechanism.key_len() {
            return Err(ScramError::Malformed {
                message: "salted password",
                why: format!(
                    "{} bytes; {mechanism} makes {}",
                    salted_password.len(),
                    mechanism.key_len()
                ),
            });
        }
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&mechanism.client_key(salted_password)),
            server_key: mechanism.server_key(salted_password),
        })
    }

    /// Checks a stored credential's fields (a file can be edited by hand).
    pub fn validate(&self) -> Result<(), ScramError> {
        check_salt_and_iterations(&self.salt, self.iterations)?;
        let len = self.mechanism.key_len();
        if self.stored_key.len() != len || self.server_key.len() != len {
            return Err(ScramError::Malformed {
                message: "stored credential",
                why: format!("{} keys are {len} bytes", self.mechanism),
            });
        }
        Ok(())
    }

    /// True when `password` is this credential's (for SASL PLAIN). Costs the credential's
    /// PBKDF2 iterations; the comparison takes the same time wherever the keys differ.
    pub fn matches_password(&self, password: &[u8]) -> bool {
        let salted = self
            .mechanism
            .salted_password(password, &self.salt, self.iterations);
        let stored = self.mechanism.hash(&self.mechanism.client_key(&salted));
        bool::from(stored.ct_eq(&self.stored_key))
    }
}

fn check_salt_and_iterations(salt: &[u8], iterations: u32) -> Result<(), ScramError> {
    if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
        return Err(ScramError::Iterations { iterations });
    }
    if salt.is_empty() || salt.len() > SALT_BYTES_MAX {
        return Err(ScramError::SaltLength { len: salt.len() });
    }
    Ok(())
}

/// Fills `buf` from the operating system's random source.
pub(crate) fn random(buf: &mut [u8]) -> Result<(), ScramError> {
    getrandom::fill(buf).map_err(|e| ScramError::Random(e.to_string()))
}

/// A fresh nonce: printable, without ',' (base64 of random bytes).
pub fn new_nonce() -> Result<String, ScramError> {
    let mut bytes = [0; NONCE_RANDOM_BYTES];
    random(&mut bytes)?;
    Ok(b64(&bytes))
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn unb64(text: &str, message: &'static str, what: &str) -> Result<Vec<u8>, ScramError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| ScramError::Malformed {
            message,
            why: format!("{what} is not base64: {e}"),
        })
}
