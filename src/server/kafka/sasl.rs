//! SaslHandshake and SaslAuthenticate: a Kafka client's login on a SASL listener (KIP-152
//! framing: every SASL message in a SaslAuthenticate request), and its renewal before the
//! session lifetime ends (KIP-368). SaslHandshake v0 (the SASL messages unframed after it)
//! is refused: every client since Kafka 1.0 uses v1.
//!
//! The session's [`Sasl`] state says what may come next; anything out of order is
//! ILLEGAL_SASL_STATE and closes the connection. A failed login (unknown user and wrong
//! password alike: same error, same delay) is answered SASL_AUTHENTICATION_FAILED after
//! `login_failure_delay`, and the connection closes.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tracing::warn;

use super::{Conn, Pending, Reply, respond};
use crate::metrics::counters::Metrics;
use crate::protocol::kafka::RequestHeader;
use crate::server::session::Auth;
use crate::server::session::auth::{Sasl, SaslMechanism};
use crate::server::session::login::{self, Failure, Step};

const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;
const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// SaslHandshake: the client names its mechanism. Also starts a renewal of a login that
/// succeeded (the principal stays served meanwhile).
pub(super) fn handshake(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: SaslHandshakeRequest,
) -> Pending {
    let offered = login::offered(conn.listener_security);
    let names = offered
        .iter()
        .map(|m| StrBytes::from_static_str(m.name()))
        .collect();
    let chosen =
        SaslMechanism::from_name(request.mechanism.as_str()).filter(|m| offered.contains(m));
    let mut auth = conn.auth.borrow_mut();
    let error = match (&mut *auth, chosen) {
        // v0 sends the SASL messages without Kafka framing (clients before Kafka 1.0);
        // advertised only because librdkafka looks for v0 to know SASL is there at all.
        (Auth::Sasl { state, .. }, _) if header.api_version == 0 => illegal(
            conn,
            state,
            "SaslHandshake v0 (unframed SASL) is not served; use v1",
        ),
        (Auth::Sasl { state, renewing }, Some(mechanism)) => match state {
            Sasl::Start => {
                *state = Sasl::Chosen(mechanism);
                0
            }
            Sasl::Done { principal, .. } => {
                *renewing = Some(principal.clone());
                *state = Sasl::Chosen(mechanism);
                0
            }
            _ => illegal(conn, state, "SaslHandshake in the middle of a login"),
        },
        (Auth::Sasl { .. }, None) => {
            Metrics::inc(&conn.shard.metrics.auth_logins_failed);
            warn!(peer = %conn.peer, mechanism = request.mechanism.as_str(), "SASL mechanism not offered on this listener");
            UNSUPPORTED_SASL_MECHANISM
        }
        (_, _) => {
            Metrics::inc(&conn.shard.metrics.auth_logins_failed);
            warn!(peer = %conn.peer, listener = %conn.listener_name, "SaslHandshake on a listener without SASL");
            ILLEGAL_SASL_STATE
        }
    };
    let response = SaslHandshakeResponse::default()
        .with_error_code(error)
        .with_mechanisms(names);
    Pending::Ready(Reply::frame(respond(&header, &response)))
}

/// Marks the login failed for a request out of order; returns ILLEGAL_SASL_STATE.
fn illegal(conn: &Conn, state: &mut Sasl, why: &str) -> i16 {
    Metrics::inc(&conn.shard.metrics.auth_logins_failed);
    warn!(peer = %conn.peer, why, "SASL request out of order; connection closed");
    *state = Sasl::Failed;
    ILLEGAL_SASL_STATE
}

pub(super) fn authenticate(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: SaslAuthenticateRequest,
) -> Pending {
    match login::step(conn, &request.auth_bytes) {
        Step::Continue(message) => Pending::Ready(answer(&header, 0, None, message, 0)),
        Step::Done { user, last } => done(conn, &header, &user, last),
        Step::CheckPlain(bytes) => {
            let conn = Rc::clone(conn);
            Pending::later(async move {
                let next = match login::check_plain(&conn, bytes).await {
                    Ok(user) => done(&conn, &header, &user, String::new()),
                    Err(failure) => failed(&conn, header, failure),
                };
                match next {
                    Pending::Ready(reply) => reply,
                    Pending::Later(later) => later.await,
                }
            })
        }
        Step::Failed(failure) => failed(conn, header, failure),
    }
}

/// A login that proved its credentials (or a renewal as another principal, refused).
fn done(conn: &Rc<Conn>, header: &RequestHeader, user: &str, last: String) -> Pending {
    match login::succeed(conn, user) {
        Ok(lifetime) => {
            let lifetime_ms = lifetime.map_or(0, |l| l.as_millis().min(i64::MAX as u128) as i64);
            Pending::Ready(answer(header, 0, None, last, lifetime_ms))
        }
        Err(failure) => failed(conn, header.clone(), failure),
    }
}

/// Answers a failed login after the failure delay, and closes the connection.
fn failed(conn: &Rc<Conn>, header: RequestHeader, failure: Failure) -> Pending {
    login::record_failure(conn, &failure);
    let (code, message) = match failure {
        Failure::Illegal(why) => (ILLEGAL_SASL_STATE, why.to_string()),
        Failure::Refused { .. } => (SASL_AUTHENTICATION_FAILED, login::REFUSED_TEXT.to_string()),
    };
    let delay = login::failure_delay(conn);
    Pending::later(async move {
        glommio::timer::sleep(delay).await;
        let mut reply = answer(&header, code, Some(message), String::new(), 0);
        reply.close = true;
        reply
    })
}

fn answer(
    header: &RequestHeader,
    error_code: i16,
    message: Option<String>,
    auth_bytes: String,
    session_lifetime_ms: i64,
) -> Reply {
    let response = SaslAuthenticateResponse::default()
        .with_error_code(error_code)
        .with_error_message(message.map(StrBytes::from_string))
        .with_auth_bytes(Bytes::from(auth_bytes.into_bytes()))
        .with_session_lifetime_ms(session_lifetime_ms);
    Reply::frame(respond(header, &response))
}
