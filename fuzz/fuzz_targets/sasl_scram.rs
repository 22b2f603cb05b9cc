//! The SASL messages a client sends before it is anyone (PLAIN, SCRAM client-first and
//! client-final), and the server messages the client library reads, fed whatever bytes.
//!
//! Properties: nothing panics; a PLAIN message that parses has fields within their limits;
//! an unknown user never logs in, whatever the client-final message says (the fake
//! credential must not be usable); a SCRAM exchange refuses a client-final whose nonce does
//! not end with the exchange's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagurus::security::plain::{FIELD_BYTES_MAX, PlainMessage};
use pagurus::security::scram::client::ScramClient;
use pagurus::security::scram::server::{ServerExchange, ServerSecret};
use pagurus::security::scram::{ClientFirst, Mechanism, ScramCredential};

const SERVER_NONCE: &str = "fuzz-server-nonce";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    // The rest in two: a first message and a last one.
    let cut = if rest.is_empty() {
        0
    } else {
        usize::from(mode) % rest.len()
    };
    let (first, last) = rest.split_at(cut);
    match mode % 4 {
        0 => plain(rest, mode & 0x80 != 0),
        1 => scram(first, last, None),
        2 => scram(first, last, Some(credential())),
        _ => client(first, last),
    }
});

fn secret() -> ServerSecret {
    ServerSecret::from_bytes([9; 32])
}

/// A credential for the user `fuzz`, password `pw` (derived once: PBKDF2 is slow).
fn credential() -> ScramCredential {
    static CREDENTIAL: std::sync::OnceLock<ScramCredential> = std::sync::OnceLock::new();
    CREDENTIAL
        .get_or_init(|| {
            ScramCredential::derive(Mechanism::ScramSha256, b"pw", b"fuzz-salt-0123", 4096)
                .expect("a valid credential")
        })
        .clone()
}

fn plain(bytes: &[u8], check_password: bool) {
    let Ok(message) = PlainMessage::parse(bytes) else {
        return;
    };
    assert!(message.user.len() <= FIELD_BYTES_MAX);
    assert!(!message.user.is_empty());
    if check_password {
        // No such user: never authenticated (the same PBKDF2 work as a known one, so slow).
        assert!(message.authenticate(None, &secret()).is_err());
    }
}

fn scram(first: &[u8], last: &[u8], known: Option<ScramCredential>) {
    let Ok(client_first) = ClientFirst::parse(first) else {
        return;
    };
    let credential = known.as_ref().filter(|_| client_first.user == "fuzz");
    let Ok((exchange, server_first)) = ServerExchange::start(
        Mechanism::ScramSha256,
        client_first,
        credential,
        &secret(),
        SERVER_NONCE,
    ) else {
        return;
    };
    assert!(server_first.starts_with("r="));
    let unknown = credential.is_none();
    let finished = exchange.finish(last);
    if unknown {
        assert!(finished.is_err(), "an unknown user logged in");
    }
    if finished.is_ok() {
        let text = std::str::from_utf8(last).expect("an accepted message is UTF-8");
        assert!(text.contains(SERVER_NONCE));
    }
}

fn client(server_first: &[u8], server_final: &[u8]) {
    let Ok((client, _)) = ScramClient::start(Mechanism::ScramSha256, "fuzz", b"pw", "cnonce")
    else {
        return;
    };
    if let Ok((done, client_final)) = client.server_first(server_first) {
        assert!(client_final.starts_with("c=biws,r=cnonce"));
        let _ = done.server_final(server_final);
    }
}
