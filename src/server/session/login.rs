//! A SASL login's steps, whatever protocol carries them (Kafka's SaslHandshake and
//! SaslAuthenticate, the native Authenticate): choosing a mechanism, advancing the
//! session's [`Sasl`] state with each client message, checking a PLAIN password on the
//! blocking pool, and recording the outcome (the principal, its lifetime, the metrics, the
//! audit line). The front-ends only encode the answers.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::metrics::counters::Metrics;
use crate::security::acl::Principal;
use crate::security::listener::SecurityProtocol;
use crate::security::plain::PlainMessage;
use crate::security::scram::server::ServerExchange;
use crate::security::scram::{ClientFirst, Mechanism, ScramError, new_nonce};

use super::Session;
use super::auth::{Auth, Sasl, SaslMechanism};

/// What one client message produced.
pub enum Step {
    /// The next server message; the exchange goes on.
    Continue(String),
    /// The login succeeded as `user`; the last server message (SCRAM's server-final).
    Done {
        user: String,
        last: String,
    },
    /// PLAIN: checking the password is PBKDF2 work, done on the blocking pool
    /// ([`check_plain`]).
    CheckPlain(Vec<u8>),
    Failed(Failure),
}

/// Why a login failed.
pub enum Failure {
    /// A message out of order, or on a listener without SASL.
    Illegal(&'static str),
    /// Bad credentials or a bad message. Nothing tells an unknown user from a wrong
    /// password.
    Refused {
        user: Option<String>,
        error: ScramError,
    },
}

/// The mechanisms a listener offers. PLAIN sends the password itself, so only under TLS.
pub fn offered(security: SecurityProtocol) -> &'static [SaslMechanism] {
    const SCRAM: SaslMechanism = SaslMechanism::Scram(Mechanism::ScramSha256);
    const SCRAM_512: SaslMechanism = SaslMechanism::Scram(Mechanism::ScramSha512);
    match security {
        SecurityProtocol::SaslSsl => &[SCRAM, SCRAM_512, SaslMechanism::Plain],
        SecurityProtocol::SaslPlaintext => &[SCRAM, SCRAM_512],
        SecurityProtocol::Plaintext | SecurityProtocol::Ssl => &[],
    }
}

/// Advances the session's login with the client message `bytes`.
pub fn step(session: &Session, bytes: &[u8]) -> Step {
    let mut auth = session.auth.borrow_mut();
    match &mut *auth {
        Auth::Sasl { state, .. } => {
            let taken = std::mem::replace(state, Sasl::Failed);
            let (next, step) = advance(session, taken, bytes);
            *state = next;
            step
        }
        _ => Step::Failed(Failure::Illegal("a login on a listener without SASL")),
    }
}

/// The state after a client message `bytes` in `state`, and what to answer.
fn advance(session: &Session, state: Sasl, bytes: &[u8]) -> (Sasl, Step) {
    match state {
        Sasl::Chosen(SaslMechanism::Scram(mechanism)) => {
            let first = match ClientFirst::parse(bytes) {
                Ok(first) => first,
                Err(error) => return (Sasl::Failed, refused(None, error)),
            };
            let user = first.user.clone();
            let users = session.security.users();
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
            Step::Failed(Failure::Illegal("a login message before its mechanism")),
        ),
        Sasl::Verifying | Sasl::Failed => (
            Sasl::Failed,
            Step::Failed(Failure::Illegal(
                "a login message while a login is checked or after it failed",
            )),
        ),
    }
}

fn refused(user: Option<String>, error: ScramError) -> Step {
    Step::Failed(Failure::Refused { user, error })
}

/// PLAIN: parses the message and checks the password on the blocking pool; the user on
/// success. The session's state is `Failed` after a failure.
pub async fn check_plain(session: &Session, bytes: Vec<u8>) -> Result<String, Failure> {
    let users = session.security.users();
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
    checked.map_err(|(user, error)| {
        set_state(session, Sasl::Failed);
        Failure::Refused { user, error }
    })
}

fn set_state(session: &Session, to: Sasl) {
    if let Auth::Sasl { state, .. } = &mut *session.auth.borrow_mut() {
        *state = to;
    }
}

/// A login that proved its credentials: served as `User:user` from now on, for the
/// listener's session lifetime (returned). A renewal must end as the principal it renews
/// (Kafka refuses it otherwise, and so does this).
pub fn succeed(session: &Session, user: &str) -> Result<Option<Duration>, Failure> {
    let principal = Principal::user(user);
    let lifetime = session.security.config().sasl_session_lifetime;
    let renewed = {
        let mut auth = session.auth.borrow_mut();
        let Auth::Sasl { state, renewing } = &mut *auth else {
            unreachable!("a SASL login finished on a session without SASL");
        };
        let before = renewing.take();
        if let Some(before) = before.as_ref().filter(|before| **before != principal) {
            *state = Sasl::Failed;
            let error = ScramError::ServerError(format!(
                "re-authentication as {principal}, but the connection is {before}"
            ));
            return Err(Failure::Refused {
                user: Some(user.to_string()),
                error,
            });
        }
        *state = Sasl::Done {
            principal: principal.clone(),
            expires: lifetime.map(|l| Instant::now() + l),
        };
        before.is_some()
    };
    Metrics::inc(&session.shard.metrics.auth_logins_succeeded);
    info!(peer = %session.peer, %principal, listener = %session.listener_name, protocol = session.protocol.label(), renewed, "SASL login");
    Ok(lifetime)
}

/// Counts and logs a failed login (an audit line for refused credentials). The caller
/// answers after [`failure_delay`] and closes the connection.
pub fn record_failure(session: &Session, failure: &Failure) {
    Metrics::inc(&session.shard.metrics.auth_logins_failed);
    match failure {
        Failure::Illegal(why) => {
            warn!(peer = %session.peer, protocol = session.protocol.label(), why, "login out of order; connection closed");
        }
        Failure::Refused { user, error } => {
            warn!(target: "pagurus::audit", peer = %session.peer, user = user.as_deref().unwrap_or("(unparsed)"), listener = %session.listener_name, protocol = session.protocol.label(), %error, "SASL login failed; connection closed");
        }
    }
}

/// How long a failed login waits before its answer, so that guesses come slowly.
pub fn failure_delay(session: &Session) -> Duration {
    session.security.config().login_failure_delay
}

/// The text every refused login gets: nothing tells an unknown user apart.
pub const REFUSED_TEXT: &str = "Authentication failed: invalid credentials";
