//! Authenticate (api 18): a SASL SCRAM exchange carried in native frames (docs/PROTOCOL.md).
//!
//! Request body: `string mechanism` (`SCRAM-SHA-256` or `SCRAM-SHA-512`), `string token`
//! (the client's SCRAM message). Response body: `string token` (the server's SCRAM
//! message), `u64 session lifetime ms` (0: none). A login is two round trips: client-first
//! then client-final; the second answer carries the server's proof.

use crate::protocol::native::{ErrorCode, begin_response, end_frame};
use crate::protocol::wire::{Malformed, Put, Reader};

/// Longest token either side sends (the SCRAM messages' own limit).
pub const AUTH_TOKEN_BYTES_MAX: usize = 4096;

/// The answer to one Authenticate step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticateResponse {
    /// The server's SCRAM message (server-first, or server-final with its proof).
    pub token: Vec<u8>,
    /// How long the login stays valid, in ms; 0 when it does not expire. Sent with the
    /// last step; 0 before it.
    pub session_lifetime_ms: u64,
}

pub fn encode_authenticate_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    response: &AuthenticateResponse,
) {
    assert!(
        response.token.len() <= AUTH_TOKEN_BYTES_MAX,
        "a server SCRAM message is short"
    );
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_string(&response.token);
    out.put_u64(response.session_lifetime_ms);
    end_frame(out, start);
}

pub fn decode_authenticate_response(body: &[u8]) -> Result<AuthenticateResponse, Malformed> {
    let mut r = Reader::new(body);
    let token = r.string("token")?;
    if token.len() > AUTH_TOKEN_BYTES_MAX {
        return Err(Malformed { what: "token" });
    }
    let session_lifetime_ms = r.u64("session lifetime")?;
    r.finish("authenticate response")?;
    Ok(AuthenticateResponse {
        token: token.to_vec(),
        session_lifetime_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::native::{
        FRAME_LEN_BYTES, RESPONSE_HEADER_LEN, Request, decode_request, encode_request,
    };

    #[test]
    fn authenticate_round_trips() {
        let mut out = Vec::new();
        let request = Request::Authenticate {
            mechanism: b"SCRAM-SHA-512",
            token: b"n,,n=alice,r=abc",
        };
        encode_request(&mut out, 7, &request);
        let limits = crate::limits::Limits::default();
        let (header, decoded) = decode_request(&out[FRAME_LEN_BYTES..], &limits).unwrap();
        assert_eq!((header.correlation_id, decoded), (7, request));

        let response = AuthenticateResponse {
            token: b"r=abcdef,s=c2FsdA==,i=4096".to_vec(),
            session_lifetime_ms: 60_000,
        };
        let mut out = Vec::new();
        encode_authenticate_response(&mut out, 7, &response);
        let body = &out[FRAME_LEN_BYTES + RESPONSE_HEADER_LEN..];
        assert_eq!(decode_authenticate_response(body).unwrap(), response);
        assert!(decode_authenticate_response(&body[..body.len() - 1]).is_err());
    }

    #[test]
    fn an_oversized_token_is_malformed() {
        let mut out = Vec::new();
        let token = vec![b'x'; AUTH_TOKEN_BYTES_MAX + 1];
        encode_request(
            &mut out,
            1,
            &Request::Authenticate {
                mechanism: b"SCRAM-SHA-256",
                token: &token,
            },
        );
        let limits = crate::limits::Limits::default();
        assert!(decode_request(&out[FRAME_LEN_BYTES..], &limits).is_err());
    }
}
