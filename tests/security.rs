//! Security through real clients: TLS listeners (SSL with client certificates, SASL_SSL),
//! SASL logins (SCRAM-SHA-256/512, PLAIN), and the refusals: a wrong password, an unknown
//! user, no client certificate, plaintext on a TLS port, requests before the login.
//!
//! One broker has four listeners: MAIN (PLAINTEXT, the test harness's), SEC (SASL_SSL),
//! MTLS (SSL) and SP (SASL_PLAINTEXT). Certificates are made at test time (common::pki).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::pki::Pki;
use common::{Broker, free_ports, have, have_python};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, MetadataRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

const PASSWORD: &str = "alice-Secret-4711";
const WRONG_PASSWORD: &str = "mallory-Guess-0815";

struct Secured {
    dir: tempfile::TempDir,
    broker: Broker,
    pki: Pki,
    sasl_ssl: SocketAddr,
    ssl: SocketAddr,
    sasl_plain: SocketAddr,
    metrics: SocketAddr,
}

fn start() -> Secured {
    let cores = 2;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    pki.client("alice", "alice");
    let data = dir.path().join("data");
    common::security::create_user(&data, "alice", PASSWORD);
    // Each listener takes its port and one shard port per core.
    let base = free_ports(3 * (cores as u16 + 1));
    let at = |i: u16| SocketAddr::from(([127, 0, 0, 1], base + i * (cores as u16 + 1)));
    let (sasl_ssl, ssl, sasl_plain) = (at(0), at(1), at(2));
    let listeners = [
        format!("SEC=SASL_SSL://{sasl_ssl}"),
        format!("MTLS=SSL://{ssl}"),
        format!("SP=SASL_PLAINTEXT://{sasl_plain}"),
    ];
    let (cert, key, ca) = (
        pki.path("broker.pem"),
        pki.path("broker.key"),
        pki.path("ca.pem"),
    );
    let mut args = vec!["--fsync", "never"];
    for listener in &listeners {
        args.extend(["--listener", listener]);
    }
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_ports(0)));
    let metrics_arg = metrics.to_string();
    args.extend([
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
        "--metrics-listen",
        &metrics_arg,
    ]);
    let broker = Broker::start_in(&data, cores, &args);
    Secured {
        dir,
        broker,
        pki,
        sasl_ssl,
        ssl,
        sasl_plain,
        metrics,
    }
}

/// The broker's /metrics page.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: pagurus\r\nConnection: close\r\n\r\n")
        .unwrap();
    String::from_utf8_lossy(&read_to_close(&mut stream)).into_owned()
}

impl Secured {
    /// kcat's settings for a SCRAM login on SASL_SSL.
    fn scram_ssl(&self, mechanism: &str, user: &str, password: &str) -> Vec<String> {
        let mut args = self.tls_trust();
        args.extend(sasl("SASL_SSL", mechanism, user, password));
        args
    }

    fn tls_trust(&self) -> Vec<String> {
        vec![
            "-X".into(),
            format!("ssl.ca.location={}", self.pki.path("ca.pem")),
        ]
    }

    fn client_cert(&self) -> Vec<String> {
        let mut args = self.tls_trust();
        for setting in [
            "security.protocol=SSL".to_string(),
            format!("ssl.certificate.location={}", self.pki.path("alice.pem")),
            format!("ssl.key.location={}", self.pki.path("alice.key")),
        ] {
            args.extend(["-X".to_string(), setting]);
        }
        args
    }
}

fn sasl(protocol: &str, mechanism: &str, user: &str, password: &str) -> Vec<String> {
    [
        format!("security.protocol={protocol}"),
        format!("sasl.mechanisms={mechanism}"),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ]
    .into_iter()
    .flat_map(|s| ["-X".to_string(), s])
    .collect()
}

fn kcat(args: &[String], stdin: &[u8]) -> Output {
    let mut child = Command::new("timeout")
        .arg("30")
        .arg("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "kcat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn produce_args(addr: SocketAddr, topic: &str, settings: Vec<String>) -> Vec<String> {
    let mut args: Vec<String> = ["-P", "-b", &addr.to_string(), "-t", topic]
        .map(String::from)
        .to_vec();
    args.extend(settings);
    args
}

fn consume_args(addr: SocketAddr, topic: &str, settings: Vec<String>) -> Vec<String> {
    let mut args: Vec<String> = ["-C", "-e", "-q", "-b", &addr.to_string(), "-t", topic]
        .map(String::from)
        .to_vec();
    args.extend(settings);
    args
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines.sort();
    lines
}

#[test]
fn kcat_over_sasl_ssl_ssl_and_sasl_plaintext() {
    if !have("kcat", "kcat", &["-V"]) {
        return;
    }
    let s = start();
    let lines: Vec<String> = (0..20).map(|i| format!("line-{i:02}")).collect();
    let input = lines.join("\n") + "\n";
    let produce = produce_args(
        s.sasl_ssl,
        "orders",
        s.scram_ssl("SCRAM-SHA-512", "alice", PASSWORD),
    );
    ok(kcat(&produce, input.as_bytes()));
    // Read back over each secured listener: SCRAM-SHA-256 on SASL_SSL, PLAIN on SASL_SSL,
    // a client certificate on SSL, SCRAM-SHA-512 without TLS.
    let readers = [
        (s.sasl_ssl, s.scram_ssl("SCRAM-SHA-256", "alice", PASSWORD)),
        (s.sasl_ssl, s.scram_ssl("PLAIN", "alice", PASSWORD)),
        (s.ssl, s.client_cert()),
        (
            s.sasl_plain,
            sasl("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", PASSWORD),
        ),
    ];
    for (addr, settings) in readers {
        let read = ok(kcat(&consume_args(addr, "orders", settings), b""));
        assert_eq!(sorted_lines(&read), lines, "read over {addr}");
    }
    // Metadata on a listener advertises that listener's own shard ports.
    let mut meta = vec!["-L".to_string(), "-b".to_string(), s.sasl_plain.to_string()];
    meta.extend(sasl("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", PASSWORD));
    let meta = ok(kcat(&meta, b""));
    for core in 0..2u16 {
        let port = s.sasl_plain.port() + 1 + core;
        assert!(meta.contains(&format!("at 127.0.0.1:{port}")), "{meta}");
    }
    let log = s.broker.log_text();
    assert!(log.contains("SASL login"), "{log}");
    assert!(log.contains("principal=User:alice"), "{log}");
}

#[test]
fn python_clients_over_sasl_ssl_and_ssl() {
    if !have_python("confluent_kafka") || !have_python("kafka") {
        return;
    }
    let s = start();
    let scram = serde_json::json!({
        "protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "user": "alice",
        "password": PASSWORD, "ca": s.pki.path("ca.pem"),
    });
    let certificate = serde_json::json!({
        "protocol": "SSL", "ca": s.pki.path("ca.pem"),
        "cert": s.pki.path("alice.pem"), "key": s.pki.path("alice.key"),
    });
    let expected: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    for client in ["confluent", "kafka-python"] {
        for (addr, settings) in [(s.sasl_ssl, &scram), (s.ssl, &certificate)] {
            let topic = format!("{client}-{}", addr.port());
            let result = secure_driver(client, addr, &topic, settings);
            assert_eq!(
                result["consumed"],
                serde_json::json!(expected),
                "{client} over {addr}: {result}"
            );
        }
    }
}

fn secure_driver(
    client: &str,
    addr: SocketAddr,
    topic: &str,
    settings: &serde_json::Value,
) -> serde_json::Value {
    let script = format!("{}/tests/kafka/secure.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("timeout")
        .args([
            "150",
            "python3",
            &script,
            client,
            &addr.to_string(),
            topic,
            "5",
        ])
        .arg(settings.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
        panic!(
            "secure.py printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn bad_logins_and_missing_certificates_are_refused_alike() {
    if !have("kcat", "kcat", &["-V"]) {
        return;
    }
    let s = start();
    let metadata = |addr: SocketAddr, settings: Vec<String>| {
        let mut args = vec!["-L".to_string(), "-b".to_string(), addr.to_string()];
        args.extend(settings);
        kcat(&args, b"")
    };
    let wrong = metadata(
        s.sasl_ssl,
        s.scram_ssl("SCRAM-SHA-512", "alice", WRONG_PASSWORD),
    );
    let unknown = metadata(
        s.sasl_ssl,
        s.scram_ssl("SCRAM-SHA-512", "nobody", WRONG_PASSWORD),
    );
    for refused in [&wrong, &unknown] {
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("Authentication failed: invalid credentials"),
            "{stderr}"
        );
        assert!(!String::from_utf8_lossy(&refused.stdout).contains("brokers:"));
    }
    let plain_wrong = metadata(s.sasl_ssl, s.scram_ssl("PLAIN", "alice", WRONG_PASSWORD));
    assert!(!plain_wrong.status.success());
    // PLAIN would send the password in the clear: not offered without TLS.
    let plain_clear = metadata(
        s.sasl_plain,
        sasl("SASL_PLAINTEXT", "PLAIN", "alice", PASSWORD),
    );
    assert!(!plain_clear.status.success());
    assert!(String::from_utf8_lossy(&plain_clear.stderr).contains("Unsupported SASL mechanism"));
    // SSL without a client certificate.
    let no_cert = metadata(s.ssl, {
        let mut args = s.tls_trust();
        args.extend(["-X".to_string(), "security.protocol=SSL".to_string()]);
        args
    });
    assert!(!no_cert.status.success());
    assert!(!String::from_utf8_lossy(&no_cert.stdout).contains("brokers:"));
    let log = s.broker.log_text();
    assert!(log.contains("SASL login failed"), "{log}");
    assert!(log.contains("user=\"nobody\""), "{log}");
    assert!(log.contains("TLS handshake failed"), "{log}");
}

/// A Kafka request frame, for raw sockets.
fn frame<R: Encodable>(key: ApiKey, version: i16, request: &R) -> Vec<u8> {
    let mut body = bytes::BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("raw")))
        .encode(&mut body, key.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Everything the broker sends until it closes the connection (or 10 s pass).
fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("the broker neither answered nor closed: {e} (got {got:?})"),
        }
    }
}

#[test]
fn unauthenticated_clients_are_served_nothing() {
    let s = start();
    let metadata = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    // A plaintext Kafka client on a TLS port: the TLS handshake fails; at most an alert
    // (content type 21) comes back, never a Kafka answer.
    for addr in [s.sasl_ssl, s.ssl] {
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(&metadata).unwrap();
        let got = read_to_close(&mut raw);
        assert!(got.is_empty() || got[0] == 21, "{addr}: {got:?}");
    }
    // SASL without TLS: ApiVersions is answered before the login; Metadata closes the
    // connection unanswered.
    let mut raw = TcpStream::connect(s.sasl_plain).unwrap();
    raw.write_all(&frame(
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    ))
    .unwrap();
    let mut size = [0u8; 4];
    raw.read_exact(&mut size).unwrap();
    let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
    raw.read_exact(&mut answer).unwrap();
    assert_eq!(&answer[..4], &7i32.to_be_bytes(), "ApiVersions answered");
    raw.write_all(&metadata).unwrap();
    assert_eq!(read_to_close(&mut raw), Vec::<u8>::new());
    // Half-authenticated: a SaslHandshake, then Metadata instead of SaslAuthenticate.
    let mut raw = TcpStream::connect(s.sasl_plain).unwrap();
    let handshake = kafka_protocol::messages::SaslHandshakeRequest::default()
        .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));
    raw.write_all(&frame(ApiKey::SaslHandshake, 1, &handshake))
        .unwrap();
    raw.read_exact(&mut size).unwrap();
    let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
    raw.read_exact(&mut answer).unwrap();
    assert_eq!(&answer[4..6], &0i16.to_be_bytes(), "mechanism accepted");
    raw.write_all(&metadata).unwrap();
    assert_eq!(read_to_close(&mut raw), Vec::<u8>::new());
    // HermitMQ v1 cannot log in: refused on a SASL listener.
    let mut raw = TcpStream::connect(s.sasl_plain).unwrap();
    raw.write_all(&[pagurus::protocol::hermit::ROLE_PRODUCER])
        .unwrap();
    assert_eq!(read_to_close(&mut raw), Vec::<u8>::new());
    let log = s.broker.log_text();
    assert!(log.contains("request before authentication"), "{log}");
    assert!(
        log.contains("HermitMQ v1 connection on a listener"),
        "{log}"
    );
    assert!(log.contains("TLS handshake failed"), "{log}");
}

#[test]
fn passwords_are_never_stored_or_logged() {
    if !have("kcat", "kcat", &["-V"]) {
        return;
    }
    let s = start();
    for password in [PASSWORD, WRONG_PASSWORD] {
        for mechanism in ["SCRAM-SHA-512", "PLAIN"] {
            let mut args = vec!["-L".to_string(), "-b".to_string(), s.sasl_ssl.to_string()];
            args.extend(s.scram_ssl(mechanism, "alice", password));
            let _ = kcat(&args, b"");
        }
    }
    let mut files = vec![s.dir.path().join("data")];
    let mut searched = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        searched += 1;
        for password in [PASSWORD, WRONG_PASSWORD] {
            let found = bytes
                .windows(password.len())
                .any(|w| w == password.as_bytes());
            assert!(!found, "{} holds a password", path.display());
        }
    }
    assert!(searched > 2, "the data directory was searched");
    let log = s.broker.log_text();
    assert!(log.contains("SASL login failed"), "the logins ran: {log}");
    let metrics = scrape(s.metrics);
    assert!(
        metrics.contains("pagurus_auth_logins_failed_total"),
        "{metrics}"
    );
    for password in [PASSWORD, WRONG_PASSWORD] {
        assert!(!log.contains(password), "the log holds a password");
        assert!(!metrics.contains(password), "the metrics hold a password");
    }
}

/// The SHA-256 fingerprint of the certificate a TLS listener presents, by openssl.
fn served_fingerprint(addr: SocketAddr) -> String {
    let script = format!(
        "openssl s_client -connect {addr} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
    );
    let out = Command::new("timeout")
        .args(["20", "sh", "-c", &script])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn file_fingerprint(path: &str) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in", path])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn sighup_and_wait_for(broker: &Broker, line: &str) {
    let before = broker.log_text().matches(line).count();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(broker.pid()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while broker.log_text().matches(line).count() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "no {line:?} in the log"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_reloads_the_tls_files_and_keeps_the_old_ones_when_bad() {
    if !have("openssl", "openssl", &["version"]) {
        return;
    }
    let s = start();
    let cert = s.pki.path("broker.pem");
    let first = file_fingerprint(&cert);
    assert!(first.contains("Fingerprint"), "{first}");
    assert_eq!(served_fingerprint(s.sasl_ssl), first);
    // A broken file: the broker says so and keeps serving the old certificate.
    let good = std::fs::read(&cert).unwrap();
    std::fs::write(&cert, b"not a certificate").unwrap();
    sighup_and_wait_for(&s.broker, "TLS files not reloaded");
    assert_eq!(served_fingerprint(s.sasl_ssl), first);
    std::fs::write(&cert, good).unwrap();
    // A new certificate: new connections get it.
    s.pki.reissue_broker();
    let second = file_fingerprint(&cert);
    assert_ne!(second, first);
    sighup_and_wait_for(&s.broker, "TLS files reloaded");
    assert_eq!(served_fingerprint(s.sasl_ssl), second);
    assert_eq!(served_fingerprint(s.ssl), second, "the SSL listener too");
}
