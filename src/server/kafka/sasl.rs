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
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tracing::{info, warn};

use super::{Conn, Pending, Reply, respond};
use crate::metrics::counters::Metrics;
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::Principal;
use crate::security::listener::SecurityProtocol;
use crate::security::plain::PlainMessage;
use crate::security::scram::ClientFirst;
use crate::security::scram::server::ServerExchange;
use crate::security::scram::{Mechanism, ScramError, new_nonce};
use crate::server::session::Auth;
use crate::server::session::auth::{Sasl, SaslMechanism};

const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;
const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// The mechanisms a listener offers. PLAIN sends the password itself, so only under TLS.
fn offered(security: SecurityProtocol) -> &'static [SaslMechanism] {
    const SCRAM: SaslMechanism = SaslMechanism::Scram(Mechanism::ScramSha256);
    const SCRAM_512: SaslMechanism = SaslMechanism::Scram(Mechanism::ScramSha512);
    match security {
        SecurityProtocol::SaslSsl => &[SCRAM, SCRAM_512, SaslMechanism::Plain],
        SecurityProtocol::SaslPlaintext => &[SCRAM, SCRAM_512],
        SecurityProtocol::Plaintext | SecurityProtocol::Ssl => &[],
    }
}

/// SaslHandshake: the client names its mechanism. Also starts a renewal of a login that
/// succeeded (the principal stays served meanwhile).
pub(super) fn handshake(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: SaslHandshakeRequest,
) -> Pending {
    let offered = offered(conn.listener_security);
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

/// What one SaslAuthenticate step produced.
enum Step {
    /// The next server message; the exchange goes on.
    Continue(String),
    /// The login succeeded as `user`; the last server message (SCRAM's server-final).
    Done {
        user: String,
        last: String,
    },
    /// PLAIN: checking the password is PBKDF2 work, done on the blocking pool.
    CheckPlain(Vec<u8>),
    Failed(Failure),
}

enum Failure {
    /// Out of order (ILLEGAL_SASL_STATE).
    Illegal(&'static str),
    /// Bad credentials or a bad message (SASL_AUTHENTICATION_FAILED).
    Refused {
        user: Option<String>,
        error: ScramError,
    },
}

pub(super) fn authenticate(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: SaslAuthenticateRequest,
) -> Pending {
    let step = {
        let mut auth = conn.auth.borrow_mut();
        match &mut *auth {
            Auth::Sasl { state, .. } => {
                let taken = std::mem::replace(state, Sasl::Failed);
                let (next, step) = advance(conn, taken, &request.auth_bytes);
                *state = next;
                step
            }
            _ => Step::Failed(Failure::Illegal(
                "SaslAuthenticate on a listener without SASL",
            )),
        }
    };
    match step {
        Step::Continue(message) => Pending::Ready(answer(&header, 0, None, message, 0)),
        Step::Done { user, last } => done(conn, &header, &user, last),
        Step::CheckPlain(bytes) => check_plain(conn, header, bytes),
        Step::Failed(failure) => failed(conn, header, failure),
    }
}

/// The state after a SaslAuthenticate carrying `bytes` in `state`, and what to answer.
fn advance(conn: &Conn, state: Sasl, bytes: &[u8]) -> (Sasl, Step) {
    match state {
        Sasl::Chosen(SaslMechanism::Scram(mechanism)) => {
            let first = match ClientFirst::parse(bytes) {
                Ok(first) => first,
                Err(error) => return (Sasl::Failed, refused(None, error)),
            };
            let user = first.user.clone();
            let users = conn.security.users();
            let credential = users.credential(&user, mechanism);
            let started = new_nonce().and_then(|nonce| {
                ServerExchange::start(mechanism, first, credential, users.secret(), &nonce)
            });
            match started {
                Ok((exchange, server_first)) => (
                    Sasl::Scram(Box::new(exchange)),
                    Step::Continue(server_first),
                ),
                Err(error) => (Sasl::Failed, refused(Some(user), error)),
            }
        }
        Sasl::Scram(exchange) => {
            let user = exchange.user().to_string();
            match exchange.finish(bytes) {
                Ok(done) => (
                    Sasl::Verifying,
                    Step::Done {
                        user: done.user,
                        last: done.server_final,
                    },
                ),
                Err(error) => (Sasl::Failed, refused(Some(user), error)),
            }
        }
        Sasl::Chosen(SaslMechanism::Plain) => (Sasl::Verifying, Step::CheckPlain(bytes.to_vec())),
        Sasl::Start | Sasl::Done { .. } => (
            Sasl::Failed,
            Step::Failed(Failure::Illegal("SaslAuthenticate before SaslHandshake")),
        ),
        Sasl::Verifying | Sasl::Failed => (
            Sasl::Failed,
            Step::Failed(Failure::Illegal(
                "SaslAuthenticate while a login is checked or after it failed",
            )),
        ),
    }
}

fn refused(user: Option<String>, error: ScramError) -> Step {
    Step::Failed(Failure::Refused { user, error })
}

/// PLAIN: parses the message here and checks the password on the blocking pool.
fn check_plain(conn: &Rc<Conn>, header: RequestHeader, bytes: Vec<u8>) -> Pending {
    let conn = Rc::clone(conn);
    let users = conn.security.users();
    Pending::later(async move {
        let checked = glommio::executor()
            .spawn_blocking(move || {
                let message = PlainMessage::parse(&bytes).map_err(|e| (None, e))?;
                let user = message.user.to_string();
                let credential = users
                    .credential(&user, Mechanism::ScramSha512)
                    .or_else(|| users.credential(&user, Mechanism::ScramSha256));
                message
                    .authenticate(credential, users.secret())
                    .map(str::to_string)
                    .map_err(|e| (Some(user), e))
            })
            .await;
        let failed_with = |user, error| Failure::Refused { user, error };
        match checked {
            Ok(user) => match done(&conn, &header, &user, String::new()) {
                Pending::Ready(reply) => reply,
                Pending::Later(later) => later.await,
            },
            Err((user, error)) => {
                set_state(&conn, Sasl::Failed);
                match failed(&conn, header, failed_with(user, error)) {
                    Pending::Ready(reply) => reply,
                    Pending::Later(later) => later.await,
                }
            }
        }
    })
}

fn set_state(conn: &Conn, to: Sasl) {
    if let Auth::Sasl { state, .. } = &mut *conn.auth.borrow_mut() {
        *state = to;
    }
}

/// A login that proved its credentials: served as `User:user` from now on, unless it
/// renews a login of another principal (refused, as Kafka refuses it).
fn done(conn: &Rc<Conn>, header: &RequestHeader, user: &str, last: String) -> Pending {
    let principal = Principal::user(user);
    let lifetime = conn.security.config().sasl_session_lifetime;
    let renewed = {
        let mut auth = conn.auth.borrow_mut();
        let Auth::Sasl { state, renewing } = &mut *auth else {
            unreachable!("a SASL login finished on a session without SASL");
        };
        let before = renewing.take();
        if let Some(before) = before.as_ref().filter(|before| **before != principal) {
            *state = Sasl::Failed;
            drop(auth);
            let error = ScramError::ServerError(format!(
                "re-authentication as {principal}, but the connection is {before}"
            ));
            return failed(
                conn,
                header.clone(),
                Failure::Refused {
                    user: Some(user.to_string()),
                    error,
                },
            );
        }
        let expires = lifetime.map(|l| Instant::now() + l);
        *state = Sasl::Done {
            principal: principal.clone(),
            expires,
        };
        before.is_some()
    };
    Metrics::inc(&conn.shard.metrics.auth_logins_succeeded);
    info!(peer = %conn.peer, %principal, listener = %conn.listener_name, renewed, "SASL login");
    let lifetime_ms = lifetime.map_or(0, |l| l.as_millis().min(i64::MAX as u128) as i64);
    Pending::Ready(answer(header, 0, None, last, lifetime_ms))
}

/// Answers a failed login after the failure delay, and closes the connection.
fn failed(conn: &Rc<Conn>, header: RequestHeader, failure: Failure) -> Pending {
    Metrics::inc(&conn.shard.metrics.auth_logins_failed);
    let (code, message) = match failure {
        Failure::Illegal(why) => {
            warn!(peer = %conn.peer, why, "SASL request out of order; connection closed");
            (ILLEGAL_SASL_STATE, why.to_string())
        }
        Failure::Refused { user, error } => {
            warn!(target: "pagurus::audit", peer = %conn.peer, user = user.as_deref().unwrap_or("(unparsed)"), listener = %conn.listener_name, %error, "SASL login failed; connection closed");
            // The same text whatever went wrong: nothing tells an unknown user apart.
            (
                SASL_AUTHENTICATION_FAILED,
                "Authentication failed: invalid credentials".to_string(),
            )
        }
    };
    let delay = conn.security.config().login_failure_delay;
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
