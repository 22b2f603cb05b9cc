//! Security: the parts of authentication and authorization that know no sockets and no
//! shards, so the session front-ends (Kafka, native, HermitMQ v1) can share them.
//!
//! - [`scram`]: SCRAM-SHA-256/512 (RFC 5802, RFC 7677), server and client, sans-IO; the
//!   stored credential (salt, iterations, StoredKey, ServerKey; never the password).
//! - [`plain`]: SASL PLAIN (RFC 4616) checked against a SCRAM credential.
//! - [`users`]: the users file, `<data-dir>/security/users` (credentials, never passwords).
//! - [`acl`]: Kafka's ACL model, the authorizer, the ACL file, and what each request of
//!   each protocol needs.
//! - [`tls`]: certificates and keys checked at start, rustls server configurations, the
//!   principal of a client certificate, kernel TLS detection and key extraction.
//! - [`listener`]: `NAME=SECURITY://HOST:PORT` listeners, their checks, and which wire
//!   protocols each security protocol serves.
//! - [`store`]: how the files under `<data-dir>/security/` are checked and written.
//!
//! - [`config`]: the security flags of `serve`, checked together.
//! - [`runtime`]: the state every core shares: TLS configurations, users, the authorizer.
//!
//! docs/SECURITY.md says what is wired into the sessions and what is not yet.

pub mod acl;
pub mod config;
pub mod listener;
pub mod plain;
pub mod runtime;
pub mod scram;
pub mod store;
pub mod tls;
pub mod users;

/// Longest user name, in bytes (checked before anything is allocated for it).
pub const USER_NAME_BYTES_MAX: usize = 255;

/// Why a user name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserNameError {
    #[error("the user name is empty")]
    Empty,
    #[error("the user name is {len} bytes, over the limit of {USER_NAME_BYTES_MAX}")]
    TooLong { len: usize },
    #[error(
        "the user name {name:?} holds {found:?}; whitespace and control characters are not allowed"
    )]
    BadChar { name: String, found: char },
    #[error("the user name \"*\" is the wildcard principal and cannot be a user")]
    Wildcard,
}

/// Checks a user name: 1 to [`USER_NAME_BYTES_MAX`] bytes of UTF-8 with no whitespace and
/// no control character (names are written space-separated in the users file and shown in
/// logs), and not `*` (which stands for every user in an ACL).
pub fn check_user_name(name: &str) -> Result<(), UserNameError> {
    if name.is_empty() {
        return Err(UserNameError::Empty);
    }
    if name.len() > USER_NAME_BYTES_MAX {
        return Err(UserNameError::TooLong { len: name.len() });
    }
    if name == "*" {
        return Err(UserNameError::Wildcard);
    }
    match name.chars().find(|c| c.is_whitespace() || c.is_control()) {
        Some(found) => Err(UserNameError::BadChar {
            name: name.to_string(),
            found,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_are_checked() {
        assert_eq!(check_user_name("alice"), Ok(()));
        assert_eq!(check_user_name("ünïcode,=@x"), Ok(()));
        assert_eq!(check_user_name(""), Err(UserNameError::Empty));
        assert_eq!(check_user_name("*"), Err(UserNameError::Wildcard));
        assert!(matches!(
            check_user_name("a b"),
            Err(UserNameError::BadChar { found: ' ', .. })
        ));
        assert!(matches!(
            check_user_name("a\u{7}"),
            Err(UserNameError::BadChar { .. })
        ));
        let long = "x".repeat(USER_NAME_BYTES_MAX + 1);
        assert_eq!(
            check_user_name(&long),
            Err(UserNameError::TooLong { len: long.len() })
        );
        assert_eq!(check_user_name(&long[1..]), Ok(()));
    }
}
