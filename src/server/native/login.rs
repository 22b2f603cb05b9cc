//! Authenticate (api 18): the native protocol's SCRAM login on a SASL listener. Every step
//! names its mechanism; the first step of a login (or of a renewal, once logged in) chooses
//! it, and the rest of the exchange is the shared one (`session::login`). PLAIN is not
//! offered here: the native client speaks SCRAM, which never sends the password.
//!
//! A failed login is answered `AuthenticationFailed` after the failure delay, with the same
//! text whatever went wrong, and the connection closes.

use std::rc::Rc;

use crate::protocol::native::{self, AuthenticateResponse, ErrorCode};
use crate::security::scram::Mechanism;
use crate::server::native::refusal::Refusal;
use crate::server::native::{Answer, Pending, Tag, error_frame};
use crate::server::session::Session;
use crate::server::session::auth::{Auth, Sasl, SaslMechanism};
use crate::server::session::login::{self, Failure, Step};

pub(super) fn authenticate(
    session: &Rc<Session>,
    tag: Tag,
    mechanism: &[u8],
    token: &[u8],
) -> Pending {
    if let Err(failure) = choose(session, mechanism) {
        return failed(session, tag, failure);
    }
    match login::step(session, token) {
        Step::Continue(message) => answer(tag, message, None),
        Step::Done { user, last } => match login::succeed(session, &user) {
            Ok(lifetime) => answer(tag, last, lifetime),
            Err(failure) => failed(session, tag, failure),
        },
        Step::CheckPlain(_) => failed(
            session,
            tag,
            Failure::Illegal("PLAIN is not a native mechanism"),
        ),
        Step::Failed(failure) => failed(session, tag, failure),
    }
}

/// Chooses the step's mechanism where a login starts (or a renewal of one that
/// succeeded); in the middle of an exchange the step must name the exchange's own.
fn choose(session: &Session, mechanism: &[u8]) -> Result<(), Failure> {
    let offered = login::offered(session.listener_security);
    let wanted = std::str::from_utf8(mechanism)
        .ok()
        .and_then(Mechanism::from_name)
        .filter(|m| offered.contains(&SaslMechanism::Scram(*m)));
    let mut auth = session.auth.borrow_mut();
    let Auth::Sasl { state, renewing } = &mut *auth else {
        return Err(Failure::Illegal(
            "this listener takes no login: it is not SASL_PLAINTEXT or SASL_SSL",
        ));
    };
    let Some(wanted) = wanted else {
        *state = Sasl::Failed;
        return Err(Failure::Illegal(
            "mechanism not offered: SCRAM-SHA-256 and SCRAM-SHA-512 are",
        ));
    };
    match state {
        Sasl::Start => *state = Sasl::Chosen(SaslMechanism::Scram(wanted)),
        Sasl::Done { principal, .. } => {
            *renewing = Some(principal.clone());
            *state = Sasl::Chosen(SaslMechanism::Scram(wanted));
        }
        Sasl::Scram(exchange) if exchange.mechanism() != wanted => {
            *state = Sasl::Failed;
            return Err(Failure::Illegal(
                "the mechanism changed in the middle of a login",
            ));
        }
        // The exchange goes on; out-of-order states fail in `login::step`.
        Sasl::Scram(_) | Sasl::Chosen(_) | Sasl::Verifying | Sasl::Failed => {}
    }
    Ok(())
}

fn answer(tag: Tag, token: String, lifetime: Option<std::time::Duration>) -> Pending {
    let response = AuthenticateResponse {
        token: token.into_bytes(),
        session_lifetime_ms: lifetime.map_or(0, |l| l.as_millis().min(u64::MAX as u128) as u64),
    };
    let mut frame = Vec::new();
    native::encode_authenticate_response(&mut frame, tag.1, &response);
    Pending::Ready(Answer::Frame { frame, error: None })
}

/// Answers a failed login after the failure delay, then closes the connection.
fn failed(session: &Rc<Session>, tag: Tag, failure: Failure) -> Pending {
    login::record_failure(session, &failure);
    let message = match failure {
        Failure::Illegal(why) => why.to_string(),
        Failure::Refused { .. } => login::REFUSED_TEXT.to_string(),
    };
    let refusal = Refusal::new(ErrorCode::AuthenticationFailed, message);
    let delay = login::failure_delay(session);
    Pending::Later(Box::pin(async move {
        glommio::timer::sleep(delay).await;
        Answer::Closing {
            frame: error_frame(tag.1, &refusal),
            error: ErrorCode::AuthenticationFailed,
        }
    }))
}
