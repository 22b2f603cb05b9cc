//! The broker's security settings as the `serve` flags give them: listeners, TLS files,
//! the authorizer and its super users, SASL session lifetime. Checked together before
//! anything listens.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::acl::Principal;
use super::listener::{self, ListenerError, ListenerSpec, SecurityProtocol, TlsFilesGiven};

/// A listener with its address resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub security: SecurityProtocol,
    pub addr: SocketAddr,
}

/// `--tls-cert`, `--tls-key`, `--tls-client-ca`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// Whether TLS connections move into kernel TLS after their handshake (`--ktls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KtlsMode {
    /// Where the kernel offers the `tls` ULP (the default).
    #[default]
    Auto,
    /// Never: every TLS connection encrypts in user space.
    Off,
}

/// Who decides what a principal may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthorizerKind {
    /// Everyone may do everything (the default, as in Kafka without an authorizer).
    #[default]
    None,
    /// Kafka's ACLs, deny by default (`--authorizer acl`).
    Acl,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    /// The name and security of the main listener (`--listen`, or the first `--listener`);
    /// its address is `BrokerConfig::listen`, and the shard ports follow it.
    pub main_name: String,
    pub main_security: SecurityProtocol,
    /// Every `--listener` after the first, each bound on every core.
    pub more_listeners: Vec<Listener>,
    pub tls: Option<TlsFiles>,
    pub authorizer: AuthorizerKind,
    pub super_users: Vec<Principal>,
    /// How long a SASL login holds before the client must authenticate again (KIP-368);
    /// `None`: for the life of the connection.
    pub sasl_session_lifetime: Option<Duration>,
    /// How long a failed login waits before its answer (and the connection's close).
    pub login_failure_delay: Duration,
    pub ktls: KtlsMode,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            main_name: SecurityProtocol::Plaintext.name().to_string(),
            main_security: SecurityProtocol::Plaintext,
            more_listeners: Vec::new(),
            tls: None,
            authorizer: AuthorizerKind::None,
            super_users: Vec::new(),
            sasl_session_lifetime: None,
            login_failure_delay: LOGIN_FAILURE_DELAY,
            ktls: KtlsMode::Auto,
        }
    }
}

/// The default wait before a failed login is answered: guessing costs a second a try per
/// connection, and the connection then closes.
pub const LOGIN_FAILURE_DELAY: Duration = Duration::from_secs(1);

/// Why the security flags are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityConfigError {
    #[error(transparent)]
    Listener(#[from] ListenerError),
    #[error(
        "--listen and --listener together: give the plaintext listener as --listener PLAINTEXT://{0}"
    )]
    ListenAndListener(String),
    #[error("listener {name}: cannot resolve {host}: {reason}")]
    Resolve {
        name: String,
        host: String,
        reason: String,
    },
    #[error("--tls-cert and --tls-key go together")]
    HalfTls,
    #[error("--tls-client-ca needs --tls-cert and --tls-key")]
    CaWithoutCert,
    #[error("--super-users is used only with --authorizer acl")]
    SuperUsersWithoutAuthorizer,
}

impl SecurityConfig {
    /// The listeners as the flags give them: `specs` (`--listener`), or else one
    /// PLAINTEXT listener at `listen`. Returns the main listener's address with the rest.
    pub fn from_flags(
        listen: Option<SocketAddr>,
        default_listen: SocketAddr,
        specs: &[ListenerSpec],
        tls: Option<TlsFiles>,
    ) -> Result<(SocketAddr, SecurityConfig), SecurityConfigError> {
        let given = TlsFilesGiven {
            cert_and_key: tls.is_some(),
            client_ca: tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        };
        let Some((first, rest)) = specs.split_first() else {
            let addr = listen.unwrap_or(default_listen);
            let config = SecurityConfig {
                tls,
                ..SecurityConfig::default()
            };
            return Ok((addr, config));
        };
        if let Some(listen) = listen {
            return Err(SecurityConfigError::ListenAndListener(listen.to_string()));
        }
        listener::validate(specs, given)?;
        let more_listeners = rest.iter().map(resolve).collect::<Result<_, _>>()?;
        let main = resolve(first)?;
        let config = SecurityConfig {
            main_name: main.name,
            main_security: main.security,
            more_listeners,
            tls,
            ..SecurityConfig::default()
        };
        Ok((main.addr, config))
    }

    /// Every listener, the main one first.
    pub fn listeners(&self, main: SocketAddr) -> Vec<Listener> {
        let first = Listener {
            name: self.main_name.clone(),
            security: self.main_security,
            addr: main,
        };
        std::iter::once(first)
            .chain(self.more_listeners.iter().cloned())
            .collect()
    }

    /// True when some listener authenticates by SASL (the users file is then read).
    pub fn uses_sasl(&self) -> bool {
        self.main_security.uses_sasl() || self.more_listeners.iter().any(|l| l.security.uses_sasl())
    }
}

/// The listener's host resolved to its first IPv4 address, else its first.
fn resolve(spec: &ListenerSpec) -> Result<Listener, SecurityConfigError> {
    let failed = |reason: String| SecurityConfigError::Resolve {
        name: spec.name.clone(),
        host: spec.host.clone(),
        reason,
    };
    let addrs: Vec<SocketAddr> = (spec.host.as_str(), spec.port)
        .to_socket_addrs()
        .map_err(|e| failed(e.to_string()))?
        .collect();
    let addr = addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| failed("no address".to_string()))?;
    Ok(Listener {
        name: spec.name.clone(),
        security: spec.security,
        addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(list: &[&str]) -> Vec<ListenerSpec> {
        list.iter()
            .map(|s| ListenerSpec::parse(s).unwrap())
            .collect()
    }

    fn tls() -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: "c.pem".into(),
            key: "k.pem".into(),
            client_ca: Some("ca.pem".into()),
        })
    }

    #[test]
    fn listen_alone_is_one_plaintext_listener() {
        let default = "127.0.0.1:9092".parse().unwrap();
        let (addr, config) = SecurityConfig::from_flags(None, default, &[], None).unwrap();
        assert_eq!(addr, default);
        assert_eq!(config.listeners(addr).len(), 1);
        assert_eq!(config.main_security, SecurityProtocol::Plaintext);
        let given = "0.0.0.0:1234".parse().unwrap();
        let (addr, _) = SecurityConfig::from_flags(Some(given), default, &[], None).unwrap();
        assert_eq!(addr, given);
    }

    #[test]
    fn listeners_replace_listen() {
        let default = "127.0.0.1:9092".parse().unwrap();
        let list = specs(&[
            "IN=PLAINTEXT://127.0.0.1:9000",
            "OUT=SASL_SSL://localhost:9001",
        ]);
        let (addr, config) = SecurityConfig::from_flags(None, default, &list, tls()).unwrap();
        assert_eq!(addr, "127.0.0.1:9000".parse().unwrap());
        let all = config.listeners(addr);
        assert_eq!(all[1].name, "OUT");
        assert_eq!(all[1].addr, "127.0.0.1:9001".parse().unwrap());
        assert!(config.uses_sasl());
        let both = SecurityConfig::from_flags(Some(default), default, &list, tls());
        assert!(matches!(
            both,
            Err(SecurityConfigError::ListenAndListener(_))
        ));
        let no_tls = SecurityConfig::from_flags(None, default, &list, None);
        assert!(matches!(
            no_tls,
            Err(SecurityConfigError::Listener(
                ListenerError::NeedsCertificate { .. }
            ))
        ));
    }
}
