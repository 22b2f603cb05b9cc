//! The hand-over over a real loopback socket: a rustls client sends its first request right
//! behind its Finished, split so that half a record has arrived when the handshake ends.
//! Where the kernel offers the `tls` ULP the connection must land in kernel TLS; elsewhere
//! (`setsockopt(TCP_ULP)` fails) it must stay in user space; either way the request, the
//! answer and a second request arrive whole.

use std::io::{Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::LocalExecutorBuilder;
use glommio::net::TcpListener;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, ProtocolVersion, RootCertStore};

use super::*;
use crate::security::tls::ktls::{self, KtlsSupport};
use crate::security::tls::{ClientAuth, TlsConfig};
use crate::server::stream::Stream;

const FIRST: &[u8] = b"the first request, sent behind the client's Finished";
const ANSWER: &[u8] = b"the broker's answer";
const SECOND: &[u8] = b"the second request";

/// A self-signed certificate for localhost: `(broker config, its certificate PEM)`.
fn broker_config(dir: &std::path::Path) -> (Arc<rustls::ServerConfig>, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_path, key_path) = (dir.join("broker.pem"), dir.join("broker.key"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let config = TlsConfig::load(&cert_path, &key_path, None).unwrap();
    (
        config.server_config(ClientAuth::None, true).unwrap(),
        cert.cert.pem(),
    )
}

/// The client: handshakes, then sends the TLS bytes of its Finished and of [`FIRST`] with
/// the last 10 bytes held back for a moment; reads [`ANSWER`], sends [`SECOND`].
fn client(port: u16, ca_pem: &str, version: &'static rustls::SupportedProtocolVersion) {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = StdTcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while conn.is_handshaking() {
        flush(&mut conn, &mut sock);
        if conn.is_handshaking() {
            conn.read_tls(&mut sock).unwrap();
            conn.process_new_packets().unwrap();
        }
    }
    conn.writer().write_all(FIRST).unwrap();
    let mut bytes = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut bytes).unwrap();
    }
    let (now, later) = bytes.split_at(bytes.len() - 10);
    sock.write_all(now).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    sock.write_all(later).unwrap();
    let mut answer = vec![0u8; ANSWER.len()];
    let mut got = 0;
    while got < answer.len() {
        match conn.reader().read(&mut answer[got..]) {
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert_ne!(conn.read_tls(&mut sock).unwrap(), 0, "the broker closed");
                conn.process_new_packets().unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(answer, ANSWER);
    conn.writer().write_all(SECOND).unwrap();
    flush(&mut conn, &mut sock);
}

fn flush(conn: &mut ClientConnection, sock: &mut StdTcpStream) {
    while conn.wants_write() {
        conn.write_tls(sock).unwrap();
    }
}

/// One connection through the hand-over; returns the stream's kind and, for user space,
/// the reason.
fn hand_over(version: &'static rustls::SupportedProtocolVersion) -> (&'static str, String) {
    let dir = tempfile::tempdir().unwrap();
    let (config, ca_pem) = broker_config(dir.path());
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let client = std::thread::spawn(move || client(port, &ca_pem, version));
            let tcp = listener.accept().await.unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let acceptor = futures_rustls::TlsAcceptor::from(config);
            let tls = Box::new(acceptor.accept(RecordIo::new(tcp, true)).await.unwrap());
            assert_eq!(
                tls.get_ref().1.protocol_version(),
                Some(version.version),
                "{version:?}"
            );
            if version.version == ProtocolVersion::TLSv1_3 {
                // The Finished and the first half of the request came in one segment:
                // rustls stopped with half a record read, which the hand-over completes.
                assert!(tls.get_ref().0.holds_bytes(), "no half record was read");
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            let (mut stream, kind, reason) = match into_kernel(tls, deadline).await.unwrap() {
                Handover::Kernel(k) => (Stream::Ktls(k), "kernel", String::new()),
                Handover::UserSpace(tls, reason) => (Stream::Tls(tls), "user space", reason),
                Handover::Failed(reason) => panic!("the kernel refused the keys: {reason}"),
            };
            let mut first = vec![0u8; FIRST.len()];
            stream.read_exact(&mut first).await.unwrap();
            assert_eq!(first, FIRST);
            stream.write_all(ANSWER).await.unwrap();
            stream.flush().await.unwrap();
            let mut second = vec![0u8; SECOND.len()];
            stream.read_exact(&mut second).await.unwrap();
            assert_eq!(second, SECOND);
            client.join().unwrap();
            (kind, reason)
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_connection_moves_into_the_kernel_where_it_can_and_stays_whole_where_not() {
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let (kind, reason) = hand_over(version);
        match ktls::detect() {
            KtlsSupport::Available => assert_eq!(kind, "kernel", "{version:?}: {reason}"),
            _ => {
                eprintln!("no tls ULP here: checked the fallback to user space ({reason})");
                assert_eq!(kind, "user space", "{version:?}");
                assert!(reason.contains("TCP_ULP"), "{version:?}: {reason}");
            }
        }
    }
}

/// [`RecordIo`] over a real socket: a record written in two parts is read in one piece; a
/// record announcing more than TLS allows is refused before its body is allocated; a
/// record cut off by the end of the stream is handed on as it is, then the end.
#[test]
fn record_io_hands_whole_records_only() {
    LocalExecutorBuilder::default()
        .spawn(|| async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let peer = std::thread::spawn(move || {
                let mut sock = StdTcpStream::connect(("127.0.0.1", port)).unwrap();
                sock.write_all(&[23, 3, 3, 0, 3, b'a']).unwrap();
                std::thread::sleep(Duration::from_millis(100));
                sock.write_all(b"bc").unwrap();
                sock.write_all(&[23, 3, 3, 0x75, 0x30]).unwrap(); // 30000 bytes
                let mut sock = StdTcpStream::connect(("127.0.0.1", port)).unwrap();
                sock.write_all(&[23, 3, 3, 0, 9, b'x']).unwrap();
            });
            let mut io = RecordIo::new(listener.accept().await.unwrap(), true);
            let mut buf = [0u8; 100];
            let n = io.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], &[23, 3, 3, 0, 3, b'a', b'b', b'c']);
            let error = io.read(&mut buf).await.unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
            assert!(io.record.len() <= RECORD_HEADER + RECORD_BODY_MAX);
            let mut io = RecordIo::new(listener.accept().await.unwrap(), true);
            peer.join().unwrap();
            let n = io.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], &[23, 3, 3, 0, 9, b'x']);
            assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        })
        .unwrap()
        .join()
        .unwrap();
}
