//! TLS with rustls (the `aws-lc-rs` provider): the broker's certificate and key, checked at start
//! so a bad file is refused with its path and the reason rather than failing at the first
//! handshake; the server configurations of the SSL listeners (a client certificate signed
//! by the client CA is required, and its subject is the principal) and of the SASL_SSL ones
//! (no client certificate); kernel TLS detection and key extraction ([`ktls`]).

pub mod ktls;
mod principal;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use principal::principal_of_certificate;

/// Largest PEM file read (a chain of a few certificates is a few KiB).
pub const PEM_BYTES_MAX: u64 = 1 << 20;

/// Why the TLS files are refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    NoKey { path: PathBuf, reason: String },
    #[error("{path}: the certificate cannot be parsed: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{path}: the certificate expired at {not_after}")]
    Expired { path: PathBuf, not_after: String },
    #[error("{path}: the certificate is not valid before {not_before}")]
    NotYetValid { path: PathBuf, not_before: String },
    #[error("{key} does not match the certificate in {cert}")]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{path}: the key cannot be used: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("{path}: a CA certificate cannot be used: {reason}")]
    BadCa { path: PathBuf, reason: String },
    #[error("an SSL listener needs a client CA (--tls-client-ca) to check client certificates")]
    NoClientCa,
    #[error("cannot make the TLS configuration: {0}")]
    Config(String),
}

/// Whether a listener asks for client certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// SSL: a certificate signed by the client CA is required; its subject is the principal.
    Required,
    /// SASL_SSL: none asked for; the client authenticates by SASL.
    None,
}

/// The broker's certificate chain and key, and the client CA, as loaded and checked.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    provider: Arc<CryptoProvider>,
    key: Arc<CertifiedKey>,
    client_roots: Option<Arc<RootCertStore>>,
    /// When the broker's certificate expires (for the start log line).
    pub not_after: String,
}

impl TlsConfig {
    /// Loads the certificate chain (`cert`, PEM, the broker's first), its private key
    /// (`key`, PEM) and the CA that signs client certificates (`client_ca`, PEM). Refused:
    /// a missing or unreadable file, one without a certificate or key, a certificate out of
    /// its validity period, a key that is not the certificate's.
    pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<TlsConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let chain = read_certificates(cert)?;
        let not_after = check_validity(cert, &chain[0])?;
        let key_der = read_key(key)?;
        let certified = CertifiedKey::from_der(chain, key_der, &provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            },
            other => TlsError::BadKey {
                path: key.to_path_buf(),
                reason: other.to_string(),
            },
        })?;
        let client_roots = client_ca.map(read_roots).transpose()?;
        Ok(TlsConfig {
            provider,
            key: Arc::new(certified),
            client_roots: client_roots.map(Arc::new),
            not_after,
        })
    }

    /// The rustls server configuration of a listener. Secret extraction is on, so that a
    /// finished handshake can move into kernel TLS ([`ktls`]). With `ktls`, no TLS 1.3
    /// session tickets: they are messages rustls would send after the handshake, and once
    /// the keys are in the kernel rustls sends nothing more (the kernel would not know the
    /// records it had encrypted). Resumption then needs a full handshake, which is rare
    /// for a broker's long-lived connections.
    pub fn server_config(
        &self,
        auth: ClientAuth,
        ktls: bool,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let config = |e: rustls::Error| TlsError::Config(e.to_string());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(config)?;
        let builder = match auth {
            ClientAuth::None => builder.with_no_client_auth(),
            ClientAuth::Required => {
                let roots = self.client_roots.clone().ok_or(TlsError::NoClientCa)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(&self.provider))
                        .build()
                        .map_err(|e| TlsError::Config(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut server =
            builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(Arc::clone(&self.key))));
        server.enable_secret_extraction = true;
        if ktls {
            server.send_tls13_tickets = 0;
        }
        Ok(Arc::new(server))
    }
}

/// A client's TLS configuration (the Rust client and the CLI): brokers are trusted when
/// their certificate chains to `ca`; `identity` is the client's own certificate chain and
/// key, for a listener that asks for one (SSL). The files are checked as the broker checks
/// its own.
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let roots = read_roots(ca)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = read_certificates(cert)?;
            check_validity(cert, &chain[0])?;
            builder
                .with_client_auth_cert(chain, read_key(key)?)
                .map_err(|e| TlsError::BadKey {
                    path: key.to_path_buf(),
                    reason: e.to_string(),
                })?
        }
    };
    Ok(Arc::new(config))
}

/// The bytes of `path`, at most [`PEM_BYTES_MAX`].
fn read_limited(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| TlsError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(PEM_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > PEM_BYTES_MAX {
        return Err(TlsError::Unreadable {
            path: path.to_path_buf(),
            reason: format!("over {PEM_BYTES_MAX} bytes: not a PEM file"),
        });
    }
    Ok(bytes)
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_limited(path)?;
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_limited(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::NoKey {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(path)? {
        check_validity(path, &cert)?;
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// Refuses a certificate outside its validity period now; returns its end, for the log.
fn check_validity(path: &Path, der: &CertificateDer<'_>) -> Result<String, TlsError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| TlsError::BadCertificate {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let validity = cert.validity();
    let now = x509_parser::time::ASN1Time::now();
    if now > validity.not_after {
        return Err(TlsError::Expired {
            path: path.to_path_buf(),
            not_after: validity.not_after.to_string(),
        });
    }
    if now < validity.not_before {
        return Err(TlsError::NotYetValid {
            path: path.to_path_buf(),
            not_before: validity.not_before.to_string(),
        });
    }
    Ok(validity.not_after.to_string())
}
