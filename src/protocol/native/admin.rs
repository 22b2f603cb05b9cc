//! The security admin apis (docs/PROTOCOL.md): users and ACLs changed on a running broker.
//!
//! - ListUsers (19): empty request; response `u32 count`, per user `string name`, `u8
//!   count`, per credential `string mechanism`, `u32 iterations`.
//! - SetUser (20): `string name`, `u8 count` (1-2), per credential `string mechanism`, `u32
//!   iterations`, `string salt`, `string stored key`, `string server key`. The client
//!   derives the credential from the password: the password never crosses the network.
//!   Response: empty.
//! - DeleteUser (21): `string name`; response `u8 deleted`.
//! - ListAcls (22): empty request; response `u32 count`, bindings.
//! - ChangeAcl (23): `u8 add` (1 add, 0 remove), a binding; response `u8 changed`.
//!
//! A binding: `string resource type`, `string pattern type`, `string name`, `string
//! principal`, `string host`, `string operation`, `string permission`, each as Kafka's
//! tools spell it (`Topic`, `Literal`, `orders`, `User:alice`, `*`, `Write`, `Allow`).

use crate::protocol::native::{ErrorCode, begin_response, end_frame};
use crate::protocol::wire::{Malformed, Put, Reader};

/// Most users a ListUsers answer carries (the users file's own limit, with room).
pub const USERS_MAX: usize = 100_000;
/// Most credentials per user: one per SCRAM mechanism.
pub const CREDENTIALS_MAX: usize = 2;
/// Most bindings a ListAcls answer carries (the ACL table's own limit, with room).
pub const BINDINGS_MAX: usize = 100_000;

/// One SCRAM credential on the wire (the stored form: no password).
#[derive(Clone, PartialEq, Eq)]
pub struct WireCredential<'a> {
    pub mechanism: &'a [u8],
    pub iterations: u32,
    pub salt: &'a [u8],
    pub stored_key: &'a [u8],
    pub server_key: &'a [u8],
}

impl std::fmt::Debug for WireCredential<'_> {
    // The keys are secrets: never in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCredential")
            .field("mechanism", &String::from_utf8_lossy(self.mechanism))
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// One ACL on the wire, each part as its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireAcl<T> {
    pub resource_type: T,
    pub pattern_type: T,
    pub name: T,
    pub principal: T,
    pub host: T,
    pub operation: T,
    pub permission: T,
}

impl<T: AsRef<[u8]>> WireAcl<T> {
    fn parts(&self) -> [&[u8]; 7] {
        [
            self.resource_type.as_ref(),
            self.pattern_type.as_ref(),
            self.name.as_ref(),
            self.principal.as_ref(),
            self.host.as_ref(),
            self.operation.as_ref(),
            self.permission.as_ref(),
        ]
    }

    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        for part in self.parts() {
            out.put_string(part);
        }
    }
}

impl<'a> WireAcl<&'a [u8]> {
    pub(crate) fn read(r: &mut Reader<'a>) -> Result<WireAcl<&'a [u8]>, Malformed> {
        Ok(WireAcl {
            resource_type: r.string("resource type")?,
            pattern_type: r.string("pattern type")?,
            name: r.string("resource name")?,
            principal: r.string("principal")?,
            host: r.string("host")?,
            operation: r.string("operation")?,
            permission: r.string("permission")?,
        })
    }
}

pub(crate) fn put_credentials(out: &mut Vec<u8>, credentials: &[WireCredential<'_>]) {
    out.put_u8(u8::try_from(credentials.len()).expect("at most CREDENTIALS_MAX"));
    for c in credentials {
        out.put_string(c.mechanism);
        out.put_u32(c.iterations);
        out.put_string(c.salt);
        out.put_string(c.stored_key);
        out.put_string(c.server_key);
    }
}

pub(crate) fn read_credentials<'a>(
    r: &mut Reader<'a>,
) -> Result<Vec<WireCredential<'a>>, Malformed> {
    let count = r.u8("credential count")? as usize;
    if count == 0 || count > CREDENTIALS_MAX {
        return Err(Malformed {
            what: "credential count",
        });
    }
    let mut credentials = Vec::with_capacity(count);
    for _ in 0..count {
        credentials.push(WireCredential {
            mechanism: r.string("mechanism")?,
            iterations: r.u32("iterations")?,
            salt: r.string("salt")?,
            stored_key: r.string("stored key")?,
            server_key: r.string("server key")?,
        });
    }
    Ok(credentials)
}

/// A user as ListUsers lists it: its name and, per mechanism, the iterations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserEntry {
    pub name: String,
    pub credentials: Vec<(String, u32)>,
}

pub fn encode_list_users_response(out: &mut Vec<u8>, correlation_id: u32, users: &[UserEntry]) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    let users = &users[..users.len().min(USERS_MAX)];
    out.put_u32(u32::try_from(users.len()).expect("at most USERS_MAX"));
    for user in users {
        out.put_string(user.name.as_bytes());
        let credentials = &user.credentials[..user.credentials.len().min(CREDENTIALS_MAX)];
        out.put_u8(credentials.len() as u8);
        for (mechanism, iterations) in credentials {
            out.put_string(mechanism.as_bytes());
            out.put_u32(*iterations);
        }
    }
    end_frame(out, start);
}

pub fn decode_list_users_response(body: &[u8]) -> Result<Vec<UserEntry>, Malformed> {
    let mut r = Reader::new(body);
    let count = r.u32("user count")? as usize;
    // A user takes at least 3 bytes: refuse a count the body cannot hold.
    if count > USERS_MAX || count.saturating_mul(3) > r.remaining() {
        return Err(Malformed { what: "user count" });
    }
    let mut users = Vec::with_capacity(count);
    for _ in 0..count {
        let name = lossy(r.string("user name")?);
        let n = r.u8("credential count")? as usize;
        if n > CREDENTIALS_MAX {
            return Err(Malformed {
                what: "credential count",
            });
        }
        let mut credentials = Vec::with_capacity(n);
        for _ in 0..n {
            credentials.push((lossy(r.string("mechanism")?), r.u32("iterations")?));
        }
        users.push(UserEntry { name, credentials });
    }
    r.finish("list users response")?;
    Ok(users)
}

pub fn encode_list_acls_response(out: &mut Vec<u8>, correlation_id: u32, acls: &[WireAcl<String>]) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    let acls = &acls[..acls.len().min(BINDINGS_MAX)];
    out.put_u32(u32::try_from(acls.len()).expect("at most BINDINGS_MAX"));
    for acl in acls {
        acl.put(out);
    }
    end_frame(out, start);
}

pub fn decode_list_acls_response(body: &[u8]) -> Result<Vec<WireAcl<String>>, Malformed> {
    let mut r = Reader::new(body);
    let count = r.u32("binding count")? as usize;
    // A binding takes at least 14 bytes (seven string lengths).
    if count > BINDINGS_MAX || count.saturating_mul(14) > r.remaining() {
        return Err(Malformed {
            what: "binding count",
        });
    }
    let mut acls = Vec::with_capacity(count);
    for _ in 0..count {
        let acl = WireAcl::read(&mut r)?;
        acls.push(WireAcl {
            resource_type: lossy(acl.resource_type),
            pattern_type: lossy(acl.pattern_type),
            name: lossy(acl.name),
            principal: lossy(acl.principal),
            host: lossy(acl.host),
            operation: lossy(acl.operation),
            permission: lossy(acl.permission),
        });
    }
    r.finish("list acls response")?;
    Ok(acls)
}

/// A response whose body is one flag (DeleteUser: deleted; ChangeAcl: changed).
pub fn encode_flag_response(out: &mut Vec<u8>, correlation_id: u32, flag: bool) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u8(u8::from(flag));
    end_frame(out, start);
}

pub fn decode_flag_response(body: &[u8]) -> Result<bool, Malformed> {
    let mut r = Reader::new(body);
    let flag = r.u8("flag")?;
    r.finish("response")?;
    Ok(flag != 0)
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::protocol::native::{
        FRAME_LEN_BYTES, RESPONSE_HEADER_LEN, Request, decode_request, encode_request,
    };

    fn acl() -> WireAcl<&'static [u8]> {
        WireAcl {
            resource_type: b"Topic",
            pattern_type: b"Literal",
            name: b"orders",
            principal: b"User:alice",
            host: b"*",
            operation: b"Write",
            permission: b"Allow",
        }
    }

    fn round_trip(request: Request<'_>) {
        let mut out = Vec::new();
        encode_request(&mut out, 3, &request);
        let (_, decoded) = decode_request(&out[FRAME_LEN_BYTES..], &Limits::default()).unwrap();
        assert_eq!(decoded, request);
    }

    #[test]
    fn requests_round_trip() {
        let credential = WireCredential {
            mechanism: b"SCRAM-SHA-256",
            iterations: 4096,
            salt: b"salt",
            stored_key: &[1; 32],
            server_key: &[2; 32],
        };
        round_trip(Request::SetUser {
            name: b"alice",
            credentials: vec![credential.clone(), credential],
        });
        round_trip(Request::DeleteUser { name: b"alice" });
        round_trip(Request::ListUsers);
        round_trip(Request::ListAcls);
        round_trip(Request::ChangeAcl {
            add: true,
            acl: acl(),
        });
    }

    #[test]
    fn responses_round_trip_and_refuse_counts_they_cannot_hold() {
        let users = vec![UserEntry {
            name: "alice".into(),
            credentials: vec![("SCRAM-SHA-512".into(), 4096)],
        }];
        let mut out = Vec::new();
        encode_list_users_response(&mut out, 1, &users);
        let body = &out[FRAME_LEN_BYTES + RESPONSE_HEADER_LEN..];
        assert_eq!(decode_list_users_response(body).unwrap(), users);
        assert!(decode_list_users_response(&[0xff, 0xff, 0xff, 0xff]).is_err());

        let owned = acl();
        let owned = WireAcl {
            resource_type: lossy(owned.resource_type),
            pattern_type: lossy(owned.pattern_type),
            name: lossy(owned.name),
            principal: lossy(owned.principal),
            host: lossy(owned.host),
            operation: lossy(owned.operation),
            permission: lossy(owned.permission),
        };
        let mut out = Vec::new();
        encode_list_acls_response(&mut out, 1, std::slice::from_ref(&owned));
        let body = &out[FRAME_LEN_BYTES + RESPONSE_HEADER_LEN..];
        assert_eq!(decode_list_acls_response(body).unwrap(), vec![owned]);
        assert!(decode_list_acls_response(&[0, 0, 0, 9]).is_err());
    }

    #[test]
    fn change_acl_takes_add_as_0_or_1_only() {
        // Any other byte would decode and re-encode differently (found by fuzz).
        let mut out = Vec::new();
        encode_request(
            &mut out,
            1,
            &Request::ChangeAcl {
                add: true,
                acl: acl(),
            },
        );
        out[FRAME_LEN_BYTES + 8] = 2;
        assert!(decode_request(&out[FRAME_LEN_BYTES..], &Limits::default()).is_err());
    }

    #[test]
    fn a_set_user_without_or_with_too_many_credentials_is_malformed() {
        for count in [0u8, 3] {
            let mut out = Vec::new();
            encode_request(&mut out, 1, &Request::DeleteUser { name: b"x" });
            // Rewrite the api key to SetUser (20) and append a bad credential count.
            out[FRAME_LEN_BYTES..FRAME_LEN_BYTES + 2].copy_from_slice(&20u16.to_be_bytes());
            out.push(count);
            let len = (out.len() - FRAME_LEN_BYTES) as u32;
            out[..FRAME_LEN_BYTES].copy_from_slice(&len.to_be_bytes());
            assert!(decode_request(&out[FRAME_LEN_BYTES..], &Limits::default()).is_err());
        }
    }
}
