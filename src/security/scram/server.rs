//! The server side of a SCRAM exchange, one message at a time.

use subtle::ConstantTimeEq;

use super::message::{ClientFinal, ClientFirst, ServerFirst};
use super::{ITERATIONS_DEFAULT, Mechanism, SALT_BYTES, ScramCredential, ScramError, b64};

/// Bytes of a [`ServerSecret`].
pub const SERVER_SECRET_BYTES: usize = 32;

/// The secret from which unknown users' salts are derived. It must stay the same across
/// restarts (it is stored in the users file): a salt that changed at each restart would
/// tell an unknown user from a known one, whose salt never changes.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerSecret([u8; SERVER_SECRET_BYTES]);

impl std::fmt::Debug for ServerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerSecret(..)")
    }
}

impl ServerSecret {
    pub fn from_bytes(bytes: [u8; SERVER_SECRET_BYTES]) -> ServerSecret {
        ServerSecret(bytes)
    }

    pub fn generate() -> Result<ServerSecret, ScramError> {
        let mut bytes = [0; SERVER_SECRET_BYTES];
        super::random(&mut bytes)?;
        Ok(ServerSecret(bytes))
    }

    pub fn as_bytes(&self) -> &[u8; SERVER_SECRET_BYTES] {
        &self.0
    }

    /// A credential for a user who does not exist: its salt is the same at every attempt
    /// and looks like a random one, and its keys (also derived, never stored) match no
    /// password anyone can find.
    pub(crate) fn fake_credential(&self, mechanism: Mechanism, user: &str) -> ScramCredential {
        let derive = |label: &[u8], len: usize| {
            let mut bytes = mechanism.hmac(
                &self.0,
                &[label, mechanism.name().as_bytes(), b"\0", user.as_bytes()],
            );
            bytes.truncate(len);
            bytes
        };
        ScramCredential {
            mechanism,
            salt: derive(b"pagurus fake salt\0", SALT_BYTES),
            iterations: ITERATIONS_DEFAULT,
            stored_key: derive(b"pagurus fake stored key\0", mechanism.key_len()),
            server_key: derive(b"pagurus fake server key\0", mechanism.key_len()),
        }
    }
}

/// A server-side exchange between its server-first and client-final messages.
pub struct ServerExchange {
    mechanism: Mechanism,
    credential: ScramCredential,
    /// False for an unknown user: the exchange runs to the end and then fails as a wrong
    /// password does.
    known: bool,
    user: String,
    gs2_header: String,
    nonce: String,
    /// `client-first-message-bare "," server-first-message`.
    auth_prefix: String,
}

impl std::fmt::Debug for ServerExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerExchange")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// A finished, successful exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The user who proved knowing the password.
    pub user: String,
    /// The server-final message to send (`v=...`).
    pub server_final: String,
}

impl ServerExchange {
    /// Answers `first` for the user's stored `credential` (`None` when there is no such user,
    /// or none for this mechanism). `server_nonce` is appended to the client's nonce: give
    /// [`super::new_nonce`]. Returns the exchange and the server-first message.
    pub fn start(
        mechanism: Mechanism,
        first: ClientFirst,
        credential: Option<&ScramCredential>,
        secret: &ServerSecret,
        server_nonce: &str,
    ) -> Result<(ServerExchange, String), ScramError> {
        // Kafka's rule: an authorization id, if given, is the user itself.
        if let Some(authzid) = first.authzid.as_ref().filter(|a| **a != first.user) {
            return Err(ScramError::AuthzidMismatch {
                authzid: authzid.clone(),
                user: first.user,
            });
        }
        if server_nonce.is_empty()
            || server_nonce
                .bytes()
                .any(|b| !(0x21..=0x7e).contains(&b) || b == b',')
        {
            return Err(ScramError::Malformed {
                message: "server nonce",
                why: "it must be printable ASCII without ','".to_string(),
            });
        }
        let (credential, known) = match credential.filter(|c| c.mechanism == mechanism) {
            Some(credential) => (credential.clone(), true),
            None => (secret.fake_credential(mechanism, &first.user), false),
        };
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = ServerFirst::encode(&nonce, &credential.salt, credential.iterations);
        let auth_prefix = format!("{},{server_first}", first.bare);
        let exchange = ServerExchange {
            mechanism,
            credential,
            known,
            user: first.user,
            gs2_header: first.gs2_header,
            nonce,
            auth_prefix,
        };
        Ok((exchange, server_first))
    }

    /// The mechanism the exchange runs.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The user the client claims to be (not yet proven).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Checks the client-final message; on success returns the server-final message. A
    /// wrong proof and an unknown user both give [`ScramError::AuthenticationFailed`],
    /// after the same work.
    pub fn finish(self, client_final: &[u8]) -> Result<Authenticated, ScramError> {
        let last = ClientFinal::parse(client_final)?;
        if last.channel_binding != b64(self.gs2_header.as_bytes()) {
            return Err(ScramError::ChannelBindingMismatch);
        }
        // RFC 5802 wants the nonce itself; librdkafka (2.0 among others) sends its own nonce
        // again before it. Kafka's broker accepts any client-final nonce that ends with the
        // exchange's, and so does this: the proof covers what the client sent, whatever it is.
        if !last.nonce.ends_with(self.nonce.as_str()) {
            return Err(ScramError::NonceMismatch);
        }
        let mechanism = self.mechanism;
        let auth_message = format!("{},{}", self.auth_prefix, last.without_proof);
        let signature = mechanism.hmac(&self.credential.stored_key, &[auth_message.as_bytes()]);
        if last.proof.len() != signature.len() {
            return Err(ScramError::AuthenticationFailed);
        }
        let client_key: Vec<u8> = last
            .proof
            .iter()
            .zip(&signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let proven = mechanism
            .hash(&client_key)
            .ct_eq(&self.credential.stored_key);
        if !(bool::from(proven) && self.known) {
            return Err(ScramError::AuthenticationFailed);
        }
        let verifier = mechanism.hmac(&self.credential.server_key, &[auth_message.as_bytes()]);
        Ok(Authenticated {
            user: self.user,
            server_final: format!("v={}", b64(&verifier)),
        })
    }
}
