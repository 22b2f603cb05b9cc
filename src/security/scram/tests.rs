use super::client::ScramClient;
use super::message::ClientFirst;
use super::server::{ServerExchange, ServerSecret};
use super::*;

// RFC 7677 section 3: user "user", password "pencil".
const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn secret() -> ServerSecret {
    ServerSecret::from_bytes([42; 32])
}

fn rfc_credential() -> ScramCredential {
    let salt = unb64(SALT_B64, "test", "salt").unwrap();
    ScramCredential::derive(Mechanism::ScramSha256, b"pencil", &salt, 4096).unwrap()
}

fn server_start(
    credential: Option<&ScramCredential>,
    client_first: &str,
) -> Result<(ServerExchange, String), ScramError> {
    let first = ClientFirst::parse(client_first.as_bytes())?;
    ServerExchange::start(
        Mechanism::ScramSha256,
        first,
        credential,
        &secret(),
        SERVER_NONCE,
    )
}

#[test]
fn rfc7677_server_side() {
    let credential = rfc_credential();
    let (exchange, server_first) = server_start(Some(&credential), CLIENT_FIRST).unwrap();
    assert_eq!(server_first, SERVER_FIRST);
    assert_eq!(exchange.user(), "user");
    let done = exchange.finish(CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(done.user, "user");
    assert_eq!(done.server_final, SERVER_FINAL);
}

#[test]
fn rfc7677_client_side() {
    let (client, first) =
        ScramClient::start(Mechanism::ScramSha256, "user", b"pencil", CLIENT_NONCE).unwrap();
    assert_eq!(first, CLIENT_FIRST);
    let (client, last) = client.server_first(SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(last, CLIENT_FINAL);
    client.server_final(SERVER_FINAL.as_bytes()).unwrap();
}

/// A whole exchange between the client and the server; the server's result.
fn exchange(
    mechanism: Mechanism,
    stored: Option<&ScramCredential>,
    user: &str,
    password: &[u8],
) -> Result<(), ScramError> {
    let (client, first) =
        ScramClient::start(mechanism, user, password, &new_nonce().unwrap()).unwrap();
    let first = ClientFirst::parse(first.as_bytes()).unwrap();
    assert_eq!(first.user, user);
    let nonce = new_nonce().unwrap();
    let (server, server_first) =
        ServerExchange::start(mechanism, first, stored, &secret(), &nonce).unwrap();
    let (client, last) = client.server_first(server_first.as_bytes()).unwrap();
    let done = server.finish(last.as_bytes())?;
    assert_eq!(done.user, user);
    client.server_final(done.server_final.as_bytes())
}

#[test]
fn both_mechanisms_round_trip() {
    for mechanism in Mechanism::ALL {
        let name = "alice,=x";
        let stored = ScramCredential::generate(mechanism, "s3cret ü".as_bytes(), 4096).unwrap();
        assert_eq!(stored.stored_key.len(), mechanism.key_len());
        assert_eq!(stored.salt.len(), SALT_BYTES);
        exchange(mechanism, Some(&stored), name, "s3cret ü".as_bytes()).unwrap();
        assert_eq!(
            exchange(mechanism, Some(&stored), name, b"wrong"),
            Err(ScramError::AuthenticationFailed)
        );
        assert_eq!(Mechanism::from_name(mechanism.name()), Some(mechanism));
    }
    assert_eq!(Mechanism::from_name("SCRAM-SHA-1"), None);
}

#[test]
fn an_unknown_user_looks_like_a_wrong_password() {
    let known = rfc_credential();
    let wrong = exchange(Mechanism::ScramSha256, Some(&known), "user", b"nope");
    let unknown = exchange(Mechanism::ScramSha256, None, "ghost", b"pencil");
    assert_eq!(wrong, Err(ScramError::AuthenticationFailed));
    assert_eq!(unknown, wrong);
    // A credential of the other mechanism is no credential for this one.
    let other = ScramCredential::generate(Mechanism::ScramSha512, b"pencil", 4096).unwrap();
    let mismatched = exchange(Mechanism::ScramSha256, Some(&other), "user", b"pencil");
    assert_eq!(mismatched, wrong);
    // The fake salt is the same at every attempt, shaped like a real one, and per user.
    let salt_of = |user: &str| {
        let (_, first) = server_start(None, &format!("n,,n={user},r=abc")).unwrap();
        first
    };
    assert_eq!(salt_of("ghost"), salt_of("ghost"));
    assert_ne!(salt_of("ghost"), salt_of("ghast"));
    let shown = salt_of("ghost");
    let salt = shown
        .split(",s=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert_eq!(unb64(salt, "t", "s").unwrap().len(), SALT_BYTES);
    assert!(shown.ends_with(&format!(",i={ITERATIONS_DEFAULT}")));
}

#[test]
fn malformed_client_first_messages_are_refused_with_the_reason() {
    let cases = [
        (
            "p=tls-unique,,n=user,r=abc",
            "channel binding (p=tls-unique)",
        ),
        ("x,,n=user,r=abc", "gs2 flag \"x\""),
        ("n,n=user,r=abc", "does not start a="),
        ("n", "no gs2 header"),
        ("n,,n=us=er,r=abc", "=2C or =3D"),
        ("n,,n=,r=abc", "it is empty"),
        ("n,,m=ext,n=user,r=abc", "mandatory extensions"),
        ("n,,n=user", "no r= attribute"),
        ("n,,r=abc,n=user", "expected n=..."),
        ("n,,n=user,r=", "the nonce is empty"),
        ("n,,n=user,r=a b", "not printable"),
        ("n,,n=user,r=abc,???", "unexpected attribute"),
    ];
    for (message, expected) in cases {
        let error = ClientFirst::parse(message.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{message}: {error}");
    }
    assert!(matches!(
        ClientFirst::parse(b"n,,n=u\xff,r=abc"),
        Err(ScramError::NotUtf8 { .. })
    ));
    let long = format!("n,,n=user,r={}", "a".repeat(MESSAGE_BYTES_MAX));
    assert!(matches!(
        ClientFirst::parse(long.as_bytes()),
        Err(ScramError::TooLong { .. })
    ));
    let long_name = format!("n,,n={},r=abc", "u".repeat(256));
    assert!(matches!(
        ClientFirst::parse(long_name.as_bytes()),
        Err(ScramError::BadName { .. })
    ));
    // An optional extension (Kafka's tokenauth) and the 'y' flag are fine.
    let first = ClientFirst::parse(b"y,,n=a=2Cb=3Dc,r=abc,t=1").unwrap();
    assert_eq!(first.user, "a,b=c");
    // An authzid other than the user is refused when the exchange starts.
    assert!(matches!(
        server_start(Some(&rfc_credential()), "n,a=admin,n=user,r=abc"),
        Err(ScramError::AuthzidMismatch { .. })
    ));
    let (exchange, _) = server_start(Some(&rfc_credential()), "n,a=user,n=user,r=abc").unwrap();
    assert_eq!(exchange.user(), "user");
}

#[test]
fn malformed_or_mismatched_client_finals_are_refused() {
    let credential = rfc_credential();
    let nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    let proof = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    let cases = [
        (
            format!("c=eSws,r={nonce},p={proof}"),
            ScramError::ChannelBindingMismatch,
        ),
        (
            format!("c=biws,r={nonce}x,p={proof}"),
            ScramError::NonceMismatch,
        ),
        (
            format!("c=biws,r={nonce},p=AAAA"),
            ScramError::AuthenticationFailed,
        ),
        (
            format!("c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVA="),
            ScramError::AuthenticationFailed,
        ),
    ];
    for (message, expected) in cases {
        let (exchange, _) = server_start(Some(&credential), CLIENT_FIRST).unwrap();
        assert_eq!(
            exchange.finish(message.as_bytes()),
            Err(expected),
            "{message}"
        );
    }
    for (message, expected) in [
        (format!("c=biws,r={nonce}"), "no proof"),
        (format!("r={nonce},c=biws,p={proof}"), "expected c=..."),
        (format!("c=biws,r={nonce},p=!!"), "not base64"),
    ] {
        let (exchange, _) = server_start(Some(&credential), CLIENT_FIRST).unwrap();
        let error = exchange.finish(message.as_bytes()).unwrap_err().to_string();
        assert!(error.contains(expected), "{message}: {error}");
    }
    let (exchange, _) = server_start(Some(&credential), CLIENT_FIRST).unwrap();
    let huge = vec![b'c'; MESSAGE_BYTES_MAX + 1];
    assert!(matches!(
        exchange.finish(&huge),
        Err(ScramError::TooLong { .. })
    ));
}

#[test]
fn the_client_refuses_a_bad_server() {
    let start = || {
        ScramClient::start(Mechanism::ScramSha256, "user", b"pencil", CLIENT_NONCE)
            .unwrap()
            .0
    };
    let server_first = |first: &str| start().server_first(first.as_bytes()).map(|_| ());
    let other_nonce = "r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    assert_eq!(server_first(other_nonce), Err(ScramError::NonceMismatch));
    let same_nonce = format!("r={CLIENT_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
    assert_eq!(server_first(&same_nonce), Err(ScramError::NonceMismatch));
    let few = SERVER_FIRST.replace("i=4096", "i=1");
    assert_eq!(
        server_first(&few),
        Err(ScramError::Iterations { iterations: 1 })
    );
    let many = SERVER_FIRST.replace("i=4096", "i=4000000000");
    assert!(matches!(
        server_first(&many),
        Err(ScramError::Iterations { .. })
    ));
    let no_salt = SERVER_FIRST.replace(SALT_B64, "");
    assert_eq!(
        server_first(&no_salt),
        Err(ScramError::SaltLength { len: 0 })
    );
    assert!(matches!(
        server_first("m=x,r=a,s=b,i=1"),
        Err(ScramError::Malformed { .. })
    ));
    let (client, _) = start().server_first(SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(
        client.server_final(b"e=invalid-proof"),
        Err(ScramError::ServerError("invalid-proof".to_string()))
    );
    let (client, _) = start().server_first(SERVER_FIRST.as_bytes()).unwrap();
    let forged = SERVER_FINAL.replace("v=6", "v=7");
    assert_eq!(
        client.server_final(forged.as_bytes()),
        Err(ScramError::ServerSignature)
    );
}

#[test]
fn credentials_are_checked_and_never_shown() {
    let credential = rfc_credential();
    credential.validate().unwrap();
    let shown = format!("{credential:?}");
    assert!(
        !shown.contains(&format!("{:?}", credential.stored_key)),
        "{shown}"
    );
    assert!(credential.matches_password(b"pencil"));
    assert!(!credential.matches_password(b"pencils"));
    let mut short = credential.clone();
    short.server_key.pop();
    assert!(matches!(
        short.validate(),
        Err(ScramError::Malformed { .. })
    ));
    for iterations in [ITERATIONS_MIN - 1, ITERATIONS_MAX + 1] {
        assert_eq!(
            ScramCredential::derive(Mechanism::ScramSha256, b"p", b"s", iterations),
            Err(ScramError::Iterations { iterations })
        );
    }
    assert_eq!(
        ScramCredential::derive(Mechanism::ScramSha256, b"p", b"", 4096),
        Err(ScramError::SaltLength { len: 0 })
    );
}

#[test]
fn a_client_salted_password_makes_the_same_credential_as_the_password() {
    let salt = unb64(SALT_B64, "test", "salt").unwrap();
    for mechanism in Mechanism::ALL {
        let salted = mechanism.salted_password(b"pencil", &salt, 4096);
        let made = ScramCredential::from_salted_password(mechanism, &salted, &salt, 4096).unwrap();
        let derived = ScramCredential::derive(mechanism, b"pencil", &salt, 4096).unwrap();
        assert_eq!(made, derived);
        assert!(made.matches_password(b"pencil"));
        assert!(matches!(
            ScramCredential::from_salted_password(mechanism, &salted[1..], &salt, 4096),
            Err(ScramError::Malformed { .. })
        ));
    }
    assert_eq!(
        ScramCredential::from_salted_password(Mechanism::ScramSha256, &[0; 32], &salt, 1),
        Err(ScramError::Iterations { iterations: 1 })
    );
}
