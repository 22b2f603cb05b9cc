//! The client side of a SCRAM exchange (for the Rust client and the CLI).

use subtle::ConstantTimeEq;

use super::message::{ServerFinal, ServerFirst, client_first, decode_saslname, encode_saslname};
use super::{ITERATIONS_MAX, ITERATIONS_MIN, Mechanism, SALT_BYTES_MAX, ScramError, b64};

/// A client exchange that has sent its client-first message.
pub struct ScramClient {
    mechanism: Mechanism,
    password: Vec<u8>,
    nonce: String,
    bare: String,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

/// A client exchange that has sent its client-final message and waits for the server's
/// proof that it knows the credential.
pub struct ScramClientFinal {
    server_signature: Vec<u8>,
}

impl ScramClient {
    /// Starts an exchange as `user` with `password`; `nonce` is fresh ([`super::new_nonce`]).
    /// Returns the client and the client-first message.
    pub fn start(
        mechanism: Mechanism,
        user: &str,
        password: &[u8],
        nonce: &str,
    ) -> Result<(ScramClient, String), ScramError> {
        // The same checks the server makes, so a bad name fails here with the reason.
        decode_saslname(&encode_saslname(user))?;
        let first = client_first(user, nonce);
        let bare = first["n,,".len()..].to_string();
        let client = ScramClient {
            mechanism,
            password: password.to_vec(),
            nonce: nonce.to_string(),
            bare,
        };
        Ok((client, first))
    }

    /// Reads the server-first message; returns the client-final message to send.
    pub fn server_first(self, bytes: &[u8]) -> Result<(ScramClientFinal, String), ScramError> {
        let (first, text) = ServerFirst::parse(bytes)?;
        if !first.nonce.starts_with(&self.nonce) || first.nonce.len() == self.nonce.len() {
            return Err(ScramError::NonceMismatch);
        }
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&first.iterations) {
            return Err(ScramError::Iterations {
                iterations: first.iterations,
            });
        }
        if first.salt.is_empty() || first.salt.len() > SALT_BYTES_MAX {
            return Err(ScramError::SaltLength {
                len: first.salt.len(),
            });
        }
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &first.salt, first.iterations);
        let client_key = m.client_key(&salted);
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c={},r={}", b64(b"n,,"), first.nonce);
        let auth_message = format!("{},{text},{without_proof}", self.bare);
        let signature = m.hmac(&stored_key, &[auth_message.as_bytes()]);
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_signature = m.hmac(&m.server_key(&salted), &[auth_message.as_bytes()]);
        let last = format!("{without_proof},p={}", b64(&proof));
        Ok((ScramClientFinal { server_signature }, last))
    }
}

impl ScramClientFinal {
    /// Reads the server-final message: Ok when the server proved it holds this password's
    /// credential.
    pub fn server_final(self, bytes: &[u8]) -> Result<(), ScramError> {
        match ServerFinal::parse(bytes)? {
            ServerFinal::Error(error) => Err(ScramError::ServerError(error)),
            ServerFinal::Verifier(v) if bool::from(v.ct_eq(&self.server_signature)) => Ok(()),
            ServerFinal::Verifier(_) => Err(ScramError::ServerSignature),
        }
    }
}
