//! SASL PLAIN (RFC 4616): `authzid NUL authcid NUL passwd`, checked against the user's SCRAM
//! credential (pagurus stores no other form of a password). Only over TLS does PLAIN keep
//! the password secret; the listener decides whether it is offered.

use crate::security::USER_NAME_BYTES_MAX;
use crate::security::scram::server::ServerSecret;
use crate::security::scram::{Mechanism, ScramCredential, ScramError};

/// Longest field (RFC 4616 limits each to 255 octets).
pub const FIELD_BYTES_MAX: usize = 255;
/// Longest message: three fields and two separators.
pub const MESSAGE_BYTES_MAX: usize = 3 * FIELD_BYTES_MAX + 2;

const NAME: &str = "SASL PLAIN message";

/// A parsed PLAIN message. Its `Debug` leaves the password out.
pub struct PlainMessage<'a> {
    /// The authorization identity; empty when the client sent none.
    pub authzid: &'a str,
    /// The user name.
    pub user: &'a str,
    password: &'a [u8],
}

impl std::fmt::Debug for PlainMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainMessage")
            .field("authzid", &self.authzid)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl<'a> PlainMessage<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<PlainMessage<'a>, ScramError> {
        if bytes.len() > MESSAGE_BYTES_MAX {
            return Err(ScramError::TooLong {
                message: NAME,
                len: bytes.len(),
                max: MESSAGE_BYTES_MAX,
            });
        }
        let mut fields = bytes.split(|b| *b == 0);
        let (Some(authzid), Some(user), Some(password), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(malformed("expected authzid NUL user NUL password"));
        };
        if [authzid, user, password]
            .iter()
            .any(|f| f.len() > FIELD_BYTES_MAX)
        {
            return Err(malformed(format!(
                "a field is over {FIELD_BYTES_MAX} bytes"
            )));
        }
        let utf8 = |field: &'a [u8]| {
            std::str::from_utf8(field).map_err(|_| ScramError::NotUtf8 { message: NAME })
        };
        let (authzid, user) = (utf8(authzid)?, utf8(user)?);
        if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
            return Err(ScramError::BadName {
                why: format!("{} bytes, expected 1..={USER_NAME_BYTES_MAX}", user.len()),
            });
        }
        if password.is_empty() {
            return Err(malformed("the password is empty"));
        }
        if !authzid.is_empty() && authzid != user {
            return Err(ScramError::AuthzidMismatch {
                authzid: authzid.to_string(),
                user: user.to_string(),
            });
        }
        Ok(PlainMessage {
            authzid,
            user,
            password,
        })
    }

    /// Checks the password against the user's stored `credential` (`None`: no such user).
    /// An unknown user costs the same PBKDF2 work as a known one and fails with the same
    /// [`ScramError::AuthenticationFailed`].
    pub fn authenticate(
        &self,
        credential: Option<&ScramCredential>,
        secret: &ServerSecret,
    ) -> Result<&'a str, ScramError> {
        let fake;
        let (credential, known) = match credential {
            Some(credential) => (credential, true),
            None => {
                fake = secret.fake_credential(Mechanism::ScramSha256, self.user);
                (&fake, false)
            }
        };
        if credential.matches_password(self.password) && known {
            Ok(self.user)
        } else {
            Err(ScramError::AuthenticationFailed)
        }
    }
}

fn malformed(why: impl Into<String>) -> ScramError {
    ScramError::Malformed {
        message: NAME,
        why: why.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> ServerSecret {
        ServerSecret::from_bytes([7; 32])
    }

    #[test]
    fn the_right_password_passes_and_others_fail_alike() {
        let credential =
            ScramCredential::derive(Mechanism::ScramSha512, b"pencil", b"salt", 4096).unwrap();
        let good = PlainMessage::parse(b"\0user\0pencil").unwrap();
        assert_eq!(good.authzid, "");
        assert_eq!(good.authenticate(Some(&credential), &secret()), Ok("user"));
        let with_authzid = PlainMessage::parse(b"user\0user\0pencil").unwrap();
        assert_eq!(
            with_authzid.authenticate(Some(&credential), &secret()),
            Ok("user")
        );
        let wrong = PlainMessage::parse(b"\0user\0pen").unwrap();
        let wrong_password = wrong.authenticate(Some(&credential), &secret());
        let unknown = PlainMessage::parse(b"\0nobody\0pencil").unwrap();
        let unknown_user = unknown.authenticate(None, &secret());
        assert_eq!(wrong_password, Err(ScramError::AuthenticationFailed));
        assert_eq!(unknown_user, wrong_password);
        assert!(!format!("{good:?}").contains("pencil"));
    }

    #[test]
    fn malformed_messages_are_refused_with_the_reason() {
        let cases: &[(&[u8], &str)] = &[
            (b"user\0pencil", "expected authzid NUL user NUL password"),
            (
                b"\0user\0pencil\0",
                "expected authzid NUL user NUL password",
            ),
            (b"\0\0pencil", "expected 1..=255"),
            (b"\0user\0", "the password is empty"),
            (b"bob\0user\0pencil", "differs from the user name"),
            (b"\0us\xffer\0pencil", "not UTF-8"),
        ];
        for (bytes, expected) in cases {
            let error = PlainMessage::parse(bytes).unwrap_err().to_string();
            assert!(error.contains(expected), "{bytes:?}: {error}");
        }
        let long = [b"\0".as_slice(), &[b'u'; 256], b"\0p"].concat();
        assert!(
            PlainMessage::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("over 255")
        );
        let huge = vec![b'a'; MESSAGE_BYTES_MAX + 1];
        assert!(matches!(
            PlainMessage::parse(&huge),
            Err(ScramError::TooLong { .. })
        ));
    }
}
