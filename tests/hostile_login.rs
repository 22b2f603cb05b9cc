//! Hostile clients on a SASL listener: clients that never start or never finish their
//! login, and a flood of wrong passwords. None is served, each is bounded by a timeout or
//! closed at its first request, failed logins are slowed, and the right password still
//! logs in. (The other hostile behaviours are in `hostile.rs`; `scripts/hostile.sh` runs
//! both.)

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::Broker;
use common::raw::{assert_closed_within, counters};

/// A SCRAM-SHA-256 login over the Kafka wire, with pagurus's own SCRAM client: the error
/// code of the last SaslAuthenticate (0 when logged in).
fn kafka_scram_login(conn: &mut common::kafka::Conn, user: &str, password: &str) -> i16 {
    use kafka_protocol::messages::{
        ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    };
    use kafka_protocol::protocol::{Decodable, StrBytes};
    use pagurus::security::scram::{Mechanism, client::ScramClient};
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));
    conn.call(ApiKey::SaslHandshake, 1, &handshake);
    let (client, first) = ScramClient::start(
        Mechanism::ScramSha256,
        user,
        password.as_bytes(),
        "hostilenonce",
    )
    .unwrap();
    let mut authenticate = |bytes: String| {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(bytes.into_bytes().into());
        let mut body = conn.call(ApiKey::SaslAuthenticate, 2, &request);
        SaslAuthenticateResponse::decode(&mut body, 2).unwrap()
    };
    let server_first = authenticate(first);
    if server_first.error_code != 0 {
        return server_first.error_code;
    }
    let (_, last) = client.server_first(&server_first.auth_bytes).unwrap();
    authenticate(last).error_code
}

/// Clients on a SASL listener that never finish (or never start) their login, and a flood
/// of wrong passwords: none is served, each is cut off by a timeout or closed at its first
/// request, failed logins are slowed, and a client with the right password still logs in.
#[test]
fn unauthenticated_and_half_authenticated_clients_are_cut_off() {
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::Encodable;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    common::security::create_user(&data, "alice", "right-password");
    let sasl = SocketAddr::from(([127, 0, 0, 1], common::free_ports(3)));
    let listener = format!("SP=SASL_PLAINTEXT://{sasl}");
    let mut broker = Broker::start_in(
        &data,
        2,
        &[
            "--listener",
            &listener,
            "--idle-timeout-ms",
            "3000",
            "--handshake-timeout-ms",
            "3000",
        ],
    );
    const EACH: usize = 25;
    let mut silent = Vec::new();
    for _ in 0..EACH {
        // Connected, nothing sent.
        silent.push(TcpStream::connect(sasl).unwrap());
        // ApiVersions (served before the login), then silence.
        let mut conn = common::kafka::Conn::connect(sasl);
        conn.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        silent.push(conn.stream);
        // A mechanism chosen, then silence.
        let mut conn = common::kafka::Conn::connect(sasl);
        let handshake = kafka_protocol::messages::SaslHandshakeRequest::default().with_mechanism(
            kafka_protocol::protocol::StrBytes::from_static_str("SCRAM-SHA-512"),
        );
        conn.call(ApiKey::SaslHandshake, 1, &handshake);
        silent.push(conn.stream);
        // Native: the login's first step answered, then silence.
        let mut native = pagurus::client::blocking::Client::connect(sasl).unwrap();
        let first = pagurus::protocol::native::Request::Authenticate {
            mechanism: b"SCRAM-SHA-512",
            token: b"n,,n=alice,r=half-a-login-nonce",
        };
        let id = native.send(&first).unwrap();
        native.expect(id).unwrap();
        silent.push(native.stream().tcp().try_clone().unwrap());
    }
    // Requests before the login: closed at once, unanswered.
    for _ in 0..EACH {
        let mut conn = common::kafka::Conn::connect(sasl);
        conn.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        let mut body = bytes::BytesMut::new();
        kafka_protocol::messages::RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(12)
            .with_correlation_id(99)
            .encode(&mut body, ApiKey::Metadata.request_header_version(12))
            .unwrap();
        MetadataRequest::default().encode(&mut body, 12).unwrap();
        conn.send_raw(&body);
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut conn.stream, &mut rest);
        assert!(rest.is_empty(), "answered before the login: {rest:?}");
        // Native too: a request before the login closes the connection unanswered.
        let mut native = pagurus::client::blocking::Client::connect(sasl).unwrap();
        let unanswered = native.metadata(&[]);
        assert!(
            matches!(unanswered, Err(pagurus::client::ClientError::Io(_))),
            "a native request was answered before the login: {unanswered:?}"
        );
    }
    // Wrong passwords in parallel: each answered SASL_AUTHENTICATION_FAILED no sooner than
    // the failure delay.
    let started = Instant::now();
    let wrong: Vec<_> = (0..EACH)
        .map(|i| {
            std::thread::spawn(move || {
                let mut conn = common::kafka::Conn::connect(sasl);
                let user = if i % 2 == 0 { "alice" } else { "mallory" };
                kafka_scram_login(&mut conn, user, "wrong-password")
            })
        })
        .collect();
    for login in wrong {
        assert_eq!(login.join().unwrap(), 58, "SASL_AUTHENTICATION_FAILED");
    }
    assert!(started.elapsed() >= Duration::from_millis(900));
    // The right password still gets in, and is served.
    let mut conn = common::kafka::Conn::connect(sasl);
    assert_eq!(kafka_scram_login(&mut conn, "alice", "right-password"), 0);
    conn.call(ApiKey::Metadata, 12, &MetadataRequest::default());
    for stream in &mut silent {
        assert_closed_within(stream, Duration::from_secs(30));
    }
    drop(conn);
    let counted = counters(&mut broker);
    assert!(counted["auth_logins_failed"] >= EACH as u64, "{counted:?}");
    assert!(counted["auth_logins_succeeded"] >= 1, "{counted:?}");
    assert!(
        counted["auth_unauthenticated_refused"] >= EACH as u64,
        "{counted:?}"
    );
    assert!(
        counted["connections_timed_out"] >= 3 * EACH as u64,
        "{counted:?}"
    );
}
