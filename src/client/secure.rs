//! How a client protects its connection and proves who it is: TLS (rustls) to a listener
//! that speaks it (SSL, SASL_SSL), a client certificate where the listener asks for one
//! (SSL), and a SCRAM login (the native Authenticate api) on a SASL listener.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use rustls::ClientConnection;
use rustls_pki_types::ServerName;

use crate::client::ClientError;
use crate::security::scram::Mechanism;

/// A user's SCRAM credentials for a SASL listener. The password is kept only as long as
/// the client (a reconnection logs in again); `Debug` does not show it.
#[derive(Clone)]
pub struct Login {
    pub user: String,
    pub password: Vec<u8>,
    pub mechanism: Mechanism,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

/// How to open a connection: plain or TLS, anonymous or logged in.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// TLS with this configuration (see [`tls_config`]); plain TCP when `None`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Logs in with these credentials right after the greeting.
    pub login: Option<Login>,
}

/// The TLS configuration of a client that trusts brokers signed by `ca`, with its own
/// certificate and key when a listener asks for one.
pub fn tls_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    crate::security::tls::client_config(ca, identity)
        .map_err(|e| ClientError::Invalid(format!("TLS: {e}")))
}

/// A connection's byte stream: the socket, or TLS over it.
pub enum Transport {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<ClientConnection, TcpStream>>),
}

impl Transport {
    /// `tcp` as `options` asks: TLS to `host` (the name its certificate must carry, or an
    /// IP address) when there is a TLS configuration. The TLS handshake runs with the
    /// first bytes written, under the socket's timeouts.
    pub fn open(
        tcp: TcpStream,
        host: &str,
        options: &ConnectOptions,
    ) -> Result<Transport, ClientError> {
        let Some(config) = &options.tls else {
            return Ok(Transport::Plain(tcp));
        };
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| ClientError::Invalid(format!("TLS: {host:?} is no server name: {e}")))?;
        let connection = ClientConnection::new(Arc::clone(config), name)
            .map_err(|e| ClientError::Invalid(format!("TLS: {e}")))?;
        Ok(Transport::Tls(Box::new(rustls::StreamOwned::new(
            connection, tcp,
        ))))
    }

    /// The socket under the transport (timeouts, addresses).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(tcp) => tcp,
            Transport::Tls(tls) => tls.get_ref(),
        }
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(tcp) => tcp.read(buf),
            Transport::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(tcp) => tcp.write(buf),
            Transport::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Transport::Plain(tcp) => tcp.flush(),
            Transport::Tls(tls) => tls.flush(),
        }
    }
}

/// The host part of `addr` (`host:port`, `[v6]:port`), for the TLS server name.
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_what_precedes_the_port() {
        assert_eq!(host_of("mq1.internal:9092"), "mq1.internal");
        assert_eq!(host_of("127.0.0.1:9092"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9092"), "::1");
    }

    #[test]
    fn the_password_is_not_in_debug_output() {
        let login = Login {
            user: "alice".into(),
            password: b"hunter2".to_vec(),
            mechanism: Mechanism::ScramSha512,
        };
        let shown = format!("{login:?}");
        assert!(
            shown.contains("alice") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
