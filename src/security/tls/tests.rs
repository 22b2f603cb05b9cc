//! Certificates are made here, at test time, with rcgen: no private key is committed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue, IsCa, Issuer, KeyPair,
    date_time_ymd,
};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, Connection, RootCertStore, SupportedCipherSuite};
use rustls_pki_types::ServerName;

use super::ktls::{self, CryptoInfo};
use super::*;

/// A CA, a server certificate for localhost and a client certificate for alice, in PEM
/// files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: Issuer<'static, KeyPair>,
    ca_pem: String,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test CA");
        let key = KeyPair::generate().unwrap();
        let ca_pem = params.self_signed(&key).unwrap().pem();
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca: Issuer::new(params, key),
            ca_pem,
        };
        std::fs::write(pki.path("ca.pem"), &pki.ca_pem).unwrap();
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Signs a certificate made from `params`; writes `NAME.pem` and `NAME.key`.
    fn issue(&self, name: &str, params: CertificateParams) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (cert_path, key_path) = (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    fn server(&self) -> (PathBuf, PathBuf) {
        self.issue(
            "server",
            CertificateParams::new(vec!["localhost".to_string()]).unwrap(),
        )
    }

    fn alice(&self) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "example");
        dn.push(DnType::OrganizationalUnitName, "eng");
        dn.push(DnType::CommonName, "alice");
        params.distinguished_name = dn;
        self.issue("alice", params)
    }

    fn config(&self) -> TlsConfig {
        let (cert, key) = self.server();
        TlsConfig::load(&cert, &key, Some(&self.path("ca.pem"))).unwrap()
    }
}

fn provider_with(suite: Option<SupportedCipherSuite>) -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Some(suite) = suite {
        provider.cipher_suites = vec![suite];
    }
    Arc::new(provider)
}

/// A client trusting the test CA, with alice's certificate if `as_alice`.
fn client(pki: &Pki, suite: Option<SupportedCipherSuite>, as_alice: bool) -> Connection {
    let alice = as_alice.then(|| pki.alice());
    client_of(
        &pki.ca_pem,
        suite,
        alice.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
    )
}

/// A client trusting the CA in `ca_pem`, with the certificate and key at `identity` if any.
fn client_of(
    ca_pem: &str,
    suite: Option<SupportedCipherSuite>,
    identity: Option<(&Path, &Path)>,
) -> Connection {
    let mut roots = RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap();
    roots.add(ca).unwrap();
    let versions = match suite {
        Some(s) => vec![s.version()],
        None => rustls::DEFAULT_VERSIONS.to_vec(),
    };
    let builder = ClientConfig::builder_with_provider(provider_with(suite))
        .with_protocol_versions(&versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let chain = read_certificates(cert).unwrap();
            builder
                .with_client_auth_cert(chain, read_key(key).unwrap())
                .unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.enable_secret_extraction = true;
    let name = ServerName::try_from("localhost").unwrap();
    rustls::ClientConnection::new(Arc::new(config), name)
        .unwrap()
        .into()
}

fn server(pki: &Pki, auth: ClientAuth) -> Connection {
    let config = pki.config().server_config(auth, true).unwrap();
    rustls::ServerConnection::new(config).unwrap().into()
}

/// Moves TLS bytes both ways until neither side has any to send.
fn pump(a: &mut Connection, b: &mut Connection) -> Result<(), rustls::Error> {
    loop {
        let moved = transfer(a, b)? | transfer(b, a)?;
        if !moved {
            return Ok(());
        }
    }
}

fn transfer(from: &mut Connection, to: &mut Connection) -> Result<bool, rustls::Error> {
    let mut bytes = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut bytes).unwrap();
    }
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        to.read_tls(&mut rest).unwrap();
        to.process_new_packets()?;
    }
    Ok(!bytes.is_empty())
}

#[test]
fn good_files_load_and_make_both_listener_configs() {
    let pki = Pki::new();
    let config = pki.config();
    assert!(!config.not_after.is_empty());
    config.server_config(ClientAuth::Required, false).unwrap();
    config.server_config(ClientAuth::None, false).unwrap();
    let (cert, key) = pki.server();
    let no_ca = TlsConfig::load(&cert, &key, None).unwrap();
    assert!(matches!(
        no_ca.server_config(ClientAuth::Required, false),
        Err(TlsError::NoClientCa)
    ));
    no_ca.server_config(ClientAuth::None, false).unwrap();
}

#[test]
fn bad_files_are_refused_with_the_path_and_reason() {
    let pki = Pki::new();
    let (cert, key) = pki.server();
    let missing = pki.path("missing.pem");
    let shown = |e: TlsError, path: &Path, reason: &str| {
        let text = e.to_string();
        assert!(
            text.contains(&path.display().to_string()) && text.contains(reason),
            "{text}"
        );
    };
    shown(
        TlsConfig::load(&missing, &key, None).unwrap_err(),
        &missing,
        "No such file",
    );
    shown(
        TlsConfig::load(&cert, &missing, None).unwrap_err(),
        &missing,
        "No such file",
    );
    let empty = pki.path("empty.pem");
    std::fs::write(&empty, "not pem\n").unwrap();
    shown(
        TlsConfig::load(&empty, &key, None).unwrap_err(),
        &empty,
        "no PEM certificate",
    );
    shown(
        TlsConfig::load(&cert, &cert, None).unwrap_err(),
        &cert,
        "no PEM private key",
    );
    shown(
        TlsConfig::load(&cert, &key, Some(&empty)).unwrap_err(),
        &empty,
        "no PEM certificate",
    );
    // Alice's key is not the server certificate's.
    let (_, other_key) = pki.alice();
    let error = TlsConfig::load(&cert, &other_key, None).unwrap_err();
    assert!(matches!(error, TlsError::KeyMismatch { .. }), "{error}");
    shown(error, &other_key, "does not match the certificate in");
}

#[test]
fn certificates_outside_their_validity_are_refused() {
    let pki = Pki::new();
    let mut expired = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    expired.not_before = date_time_ymd(2000, 1, 1);
    expired.not_after = date_time_ymd(2001, 1, 1);
    let (cert, key) = pki.issue("expired", expired);
    let error = TlsConfig::load(&cert, &key, None).unwrap_err();
    assert!(matches!(error, TlsError::Expired { .. }), "{error}");
    assert!(
        error.to_string().contains("expired at") && error.to_string().contains("2001"),
        "{error}"
    );
    let mut future = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    future.not_before = date_time_ymd(2999, 1, 1);
    future.not_after = date_time_ymd(3000, 1, 1);
    let (cert, key) = pki.issue("future", future);
    let error = TlsConfig::load(&cert, &key, None).unwrap_err();
    assert!(matches!(error, TlsError::NotYetValid { .. }), "{error}");
}

#[test]
fn an_ssl_listener_takes_the_client_certificate_subject_as_principal() {
    let pki = Pki::new();
    let (mut c, mut s) = (client(&pki, None, true), server(&pki, ClientAuth::Required));
    pump(&mut c, &mut s).unwrap();
    assert!(!s.is_handshaking());
    let peer = s.peer_certificates().unwrap();
    let principal = principal_of_certificate(&peer[0]).unwrap();
    assert_eq!(principal.to_string(), "User:CN=alice,OU=eng,O=example");
    // Without a certificate the handshake fails; a SASL_SSL listener asks for none.
    let (mut c, mut s) = (
        client(&pki, None, false),
        server(&pki, ClientAuth::Required),
    );
    assert!(pump(&mut c, &mut s).is_err());
    let (mut c, mut s) = (client(&pki, None, false), server(&pki, ClientAuth::None));
    pump(&mut c, &mut s).unwrap();
    assert!(s.peer_certificates().is_none());
}

#[test]
fn principals_escape_and_encode_as_java_does() {
    let pki = Pki::new();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CountryName, "DE");
    dn.push(
        DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
        DnValue::Ia5String("alice@example.com".try_into().unwrap()),
    );
    dn.push(DnType::CommonName, " Smith, John+<x>;\"#");
    params.distinguished_name = dn;
    let (cert, _) = pki.issue("odd", params);
    let der = read_certificates(&cert).unwrap().remove(0);
    assert_eq!(
        principal_of_certificate(&der).unwrap().to_string(),
        "User:CN=\\ Smith\\, John\\+\\<x\\>\\;\\\"#,1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,C=DE"
    );
    assert!(principal_of_certificate(b"not a certificate").is_err());
}

/// Handshakes with one suite, sends data both ways, and checks that each side's extracted
/// transmit secrets are the other's receive secrets, sequence numbers included.
fn check_extraction(suite: SupportedCipherSuite, cipher_type: u16, info_len: usize) {
    use std::io::Write;
    let pki = Pki::new();
    let (mut c, mut s) = (
        client(&pki, Some(suite), false),
        server(&pki, ClientAuth::None),
    );
    pump(&mut c, &mut s).unwrap();
    c.writer().write_all(b"produce").unwrap();
    pump(&mut c, &mut s).unwrap();
    for _ in 0..3 {
        s.writer().write_all(b"fetched").unwrap();
        pump(&mut c, &mut s).unwrap();
    }
    let version = c.protocol_version().unwrap();
    assert_eq!(version, suite.version().version);
    let (c_tx, c_rx) = CryptoInfo::pair(version, &c.dangerous_extract_secrets().unwrap()).unwrap();
    let (s_tx, s_rx) = CryptoInfo::pair(version, &s.dangerous_extract_secrets().unwrap()).unwrap();
    assert_eq!(c_tx, s_rx, "{suite:?}: client tx is server rx");
    assert_eq!(c_rx, s_tx, "{suite:?}: client rx is server tx");
    assert_ne!(c_tx.key, c_rx.key);
    assert_eq!(c_tx.cipher_type, cipher_type);
    assert!(u64::from_be_bytes(s_tx.rec_seq) >= 3, "{suite:?}: {s_tx:?}");
    assert_eq!(c_tx.to_bytes().len(), info_len);
    assert_eq!(&c_tx.to_bytes()[..2], &c_tx.version.to_ne_bytes());
    assert!(!format!("{c_tx:?}").contains(&format!("{:?}", c_tx.key)));
}

#[test]
fn ktls_secrets_of_both_sides_match_for_tls13_and_tls12() {
    use rustls::crypto::aws_lc_rs::cipher_suite::*;
    // sizeof(struct tls12_crypto_info_aes_gcm_128) = 40, _aes_gcm_256 = 56,
    // _chacha20_poly1305 = 56.
    check_extraction(TLS13_AES_128_GCM_SHA256, 51, 40);
    check_extraction(TLS13_AES_256_GCM_SHA384, 52, 56);
    check_extraction(TLS13_CHACHA20_POLY1305_SHA256, 54, 56);
    check_extraction(TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, 51, 40);
    check_extraction(TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, 52, 56);
}

/// Every cipher suite the broker's own configuration offers, TLS 1.2 and 1.3: a handshake
/// with it gives secrets the kernel structures take (the suite passes the check made
/// before rustls gives its secrets up), and, with kTLS on, rustls sent nothing after the
/// handshake (no TLS 1.3 session tickets: their records would be counted by rustls, not
/// by the kernel).
#[test]
fn every_suite_the_broker_offers_gives_secrets_the_kernel_takes() {
    let pki = Pki::new();
    let config = pki.config().server_config(ClientAuth::None, true).unwrap();
    let suites = config.crypto_provider().cipher_suites.clone();
    let mut versions = std::collections::BTreeSet::new();
    for suite in suites {
        assert!(ktls::kernel_has_cipher(suite.suite()), "{suite:?}");
        // The test certificate's key is ECDSA; the RSA suites of TLS 1.2 have the same
        // ciphers (checked just above).
        if !suite.usable_for_signature_algorithm(rustls::SignatureAlgorithm::ECDSA) {
            continue;
        }
        let (mut c, mut s): (Connection, Connection) = (
            client(&pki, Some(suite), false),
            rustls::ServerConnection::new(Arc::clone(&config))
                .unwrap()
                .into(),
        );
        pump(&mut c, &mut s).unwrap();
        assert!(!s.is_handshaking() && !s.wants_write(), "{suite:?}");
        let version = s.protocol_version().unwrap();
        versions.insert(u16::from(version));
        let secrets = s.dangerous_extract_secrets().unwrap();
        let tx_seq = secrets.tx.0;
        let (tx, rx) = CryptoInfo::pair(version, &secrets).unwrap();
        assert_eq!(tx.to_bytes().len(), rx.to_bytes().len(), "{suite:?}");
        if version == rustls::ProtocolVersion::TLSv1_3 {
            assert_eq!(
                tx_seq, 0,
                "{suite:?}: rustls sent records after the handshake"
            );
        }
    }
    assert_eq!(versions.len(), 2, "TLS 1.2 and 1.3 offered: {versions:?}");
    // Without kTLS, TLS 1.3 tickets are sent after the handshake, as rustls does by default.
    let config = pki.config().server_config(ClientAuth::None, false).unwrap();
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let (mut c, mut s): (Connection, Connection) = (
        client(&pki, Some(suite), false),
        rustls::ServerConnection::new(config).unwrap().into(),
    );
    pump(&mut c, &mut s).unwrap();
    assert_ne!(s.dangerous_extract_secrets().unwrap().tx.0, 0);
}

/// The shell block after `<!-- openssl setup -->` in docs/SECURITY.md.
fn openssl_setup() -> String {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SECURITY.md")).unwrap();
    let after = doc
        .split_once("<!-- openssl setup -->\n```sh\n")
        .expect("the marker and a sh block")
        .1;
    after.split_once("```").unwrap().0.to_string()
}

#[test]
fn the_openssl_setup_in_the_docs_loads() {
    let have = std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("SKIPPED: openssl is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("sh")
        .args(["-e", "-c", &openssl_setup()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = |name: &str| dir.path().join(name);
    let config = TlsConfig::load(
        &file("broker.pem"),
        &file("broker.key"),
        Some(&file("ca.pem")),
    )
    .unwrap();
    let ca_pem = std::fs::read_to_string(file("ca.pem")).unwrap();
    let (alice, alice_key) = (file("alice.pem"), file("alice.key"));
    let mut c = client_of(&ca_pem, None, Some((&alice, &alice_key)));
    let mut s: Connection =
        rustls::ServerConnection::new(config.server_config(ClientAuth::Required, false).unwrap())
            .unwrap()
            .into();
    pump(&mut c, &mut s).unwrap();
    let peer = s.peer_certificates().unwrap();
    assert_eq!(
        principal_of_certificate(&peer[0]).unwrap().to_string(),
        "User:CN=alice,OU=eng,O=example"
    );
    // The broker's key with alice's certificate is refused.
    let error = TlsConfig::load(&alice, &file("broker.key"), None).unwrap_err();
    assert!(matches!(error, TlsError::KeyMismatch { .. }), "{error}");
}
