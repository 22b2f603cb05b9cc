//! Listeners: `--listener NAME=SECURITY://HOST:PORT`, with Kafka's security protocol names,
//! each serving the wire protocols its security allows.

use std::collections::BTreeSet;

use super::tls::ClientAuth;

/// Most listeners one broker has.
pub const LISTENERS_MAX: usize = 16;
/// Longest listener name.
pub const LISTENER_NAME_BYTES_MAX: usize = 64;

/// How a listener's connections are secured (Kafka's `security.protocol` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecurityProtocol {
    /// No TLS, no authentication: every client is `User:ANONYMOUS`. For localhost.
    Plaintext,
    /// TLS with a client certificate signed by the client CA; its subject is the principal.
    Ssl,
    /// SASL authentication without TLS (PLAIN would send the password in the clear).
    SaslPlaintext,
    /// TLS without client certificates, then SASL authentication.
    SaslSsl,
}

/// The wire protocols a listener may serve (it tells them apart by their first bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireProtocol {
    Kafka,
    Native,
    HermitV1,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn from_name(name: &str) -> Option<SecurityProtocol> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Whether the TLS handshake asks for a client certificate (`None`: no TLS).
    pub fn client_auth(self) -> Option<ClientAuth> {
        match self {
            SecurityProtocol::Ssl => Some(ClientAuth::Required),
            SecurityProtocol::SaslSsl => Some(ClientAuth::None),
            SecurityProtocol::Plaintext | SecurityProtocol::SaslPlaintext => None,
        }
    }

    /// Whether a listener of this kind serves `protocol`. Kafka and native clients
    /// authenticate by SASL (native: its own SCRAM exchange) where the listener asks for it.
    /// HermitMQ v1 has no authentication frame: it is served only where the connection
    /// itself says who the client is or that no one is asked, on PLAINTEXT (meant for
    /// localhost) and on SSL (with its required client certificate).
    pub fn serves(self, protocol: WireProtocol) -> bool {
        match protocol {
            WireProtocol::Kafka | WireProtocol::Native => true,
            WireProtocol::HermitV1 => {
                matches!(self, SecurityProtocol::Plaintext | SecurityProtocol::Ssl)
            }
        }
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a listener, or the set of them, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenerError {
    #[error(
        "listener {spec:?}: {why}; expected NAME=SECURITY://HOST:PORT, e.g. EXTERNAL=SASL_SSL://0.0.0.0:9093"
    )]
    Syntax { spec: String, why: String },
    #[error(
        "listener {spec:?}: unknown security protocol {found:?}; use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )]
    UnknownSecurity { spec: String, found: String },
    #[error("no listener")]
    None,
    #[error("{count} listeners, over the limit of {LISTENERS_MAX}")]
    TooMany { count: usize },
    #[error("two listeners are named {0}")]
    DuplicateName(String),
    #[error("listeners {first} and {second} both use port {port}")]
    DuplicatePort {
        first: String,
        second: String,
        port: u16,
    },
    #[error("listener {name} is {security}: it needs --tls-cert and --tls-key")]
    NeedsCertificate {
        name: String,
        security: SecurityProtocol,
    },
    #[error("listener {name} is SSL: it needs --tls-client-ca to check client certificates")]
    NeedsClientCa { name: String },
}

/// One `--listener`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub name: String,
    pub security: SecurityProtocol,
    /// A host name or address (an IPv6 one without its brackets).
    pub host: String,
    /// 0: any free port (tests).
    pub port: u16,
}

impl ListenerSpec {
    /// Parses `NAME=SECURITY://HOST:PORT`, or `SECURITY://HOST:PORT` (named after its
    /// security protocol, as Kafka does). An IPv6 host is in brackets: `[::1]:9092`.
    pub fn parse(spec: &str) -> Result<ListenerSpec, ListenerError> {
        let syntax = |why: &str| ListenerError::Syntax {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let (head, address) = spec.split_once("://").ok_or_else(|| syntax("no ://"))?;
        let (name, security_name) = match head.split_once('=') {
            Some((name, security)) => (name, security),
            None => (head, head),
        };
        let security = SecurityProtocol::from_name(security_name).ok_or_else(|| {
            ListenerError::UnknownSecurity {
                spec: spec.to_string(),
                found: security_name.to_string(),
            }
        })?;
        let name = if head.contains('=') {
            name.to_string()
        } else {
            security.name().to_string()
        };
        if name.is_empty() || name.len() > LISTENER_NAME_BYTES_MAX {
            return Err(syntax("the name must be 1 to 64 characters"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(syntax(
                "the name may hold only letters, digits, '_' and '-'",
            ));
        }
        let (host, port) = split_host_port(address).map_err(syntax)?;
        Ok(ListenerSpec {
            name,
            security,
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for ListenerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(f, "{}={}://{host}:{}", self.name, self.security, self.port)
    }
}

fn split_host_port(address: &str) -> Result<(&str, u16), &'static str> {
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (host, rest) = rest
            .split_once(']')
            .ok_or("an IPv6 address lacks its ']'")?;
        let port = rest.strip_prefix(':').ok_or("no :PORT after the address")?;
        (host, port)
    } else {
        address.rsplit_once(':').ok_or("no :PORT")?
    };
    if host.is_empty() {
        return Err("no host (0.0.0.0 listens on every interface)");
    }
    if host.contains(['/', '[', ']', ' ']) || (host.contains(':') && !address.starts_with('[')) {
        return Err("a bad host (an IPv6 address goes in brackets)");
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| "the port is not a number from 0 to 65535")?;
    Ok((host, port))
}

/// Which TLS files the broker was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsFilesGiven {
    pub cert_and_key: bool,
    pub client_ca: bool,
}

/// Checks the set of listeners: at least one, at most [`LISTENERS_MAX`], unique names,
/// unique ports (as Kafka requires; port 0 excepted), the TLS files each needs.
pub fn validate(listeners: &[ListenerSpec], tls: TlsFilesGiven) -> Result<(), ListenerError> {
    if listeners.is_empty() {
        return Err(ListenerError::None);
    }
    if listeners.len() > LISTENERS_MAX {
        return Err(ListenerError::TooMany {
            count: listeners.len(),
        });
    }
    let mut names = BTreeSet::new();
    for (i, listener) in listeners.iter().enumerate() {
        if !names.insert(listener.name.as_str()) {
            return Err(ListenerError::DuplicateName(listener.name.clone()));
        }
        let same_port = listeners[..i]
            .iter()
            .find(|other| listener.port != 0 && other.port == listener.port);
        if let Some(first) = same_port {
            return Err(ListenerError::DuplicatePort {
                first: first.name.clone(),
                second: listener.name.clone(),
                port: listener.port,
            });
        }
        if listener.security.uses_tls() && !tls.cert_and_key {
            return Err(ListenerError::NeedsCertificate {
                name: listener.name.clone(),
                security: listener.security,
            });
        }
        if listener.security == SecurityProtocol::Ssl && !tls.client_ca {
            return Err(ListenerError::NeedsClientCa {
                name: listener.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let spec = ListenerSpec::parse("EXTERNAL=SASL_SSL://0.0.0.0:9093").unwrap();
        assert_eq!(spec.name, "EXTERNAL");
        assert_eq!(spec.security, SecurityProtocol::SaslSsl);
        assert_eq!((spec.host.as_str(), spec.port), ("0.0.0.0", 9093));
        assert_eq!(spec.to_string(), "EXTERNAL=SASL_SSL://0.0.0.0:9093");
        let spec = ListenerSpec::parse("ssl://broker.example:9094").unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.security),
            ("SSL", SecurityProtocol::Ssl)
        );
        let spec = ListenerSpec::parse("LOCAL=PLAINTEXT://[::1]:9092").unwrap();
        assert_eq!(spec.host, "::1");
        assert_eq!(spec.to_string(), "LOCAL=PLAINTEXT://[::1]:9092");
        for name in ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] {
            let spec = ListenerSpec::parse(&format!("L={name}://h:1")).unwrap();
            assert_eq!(spec.security.name(), name);
        }
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        let cases = [
            ("EXTERNAL=SASL_SSL", "no ://"),
            ("EXTERNAL=TLS://h:1", "unknown security protocol \"TLS\""),
            ("=SSL://h:1", "the name must be"),
            ("BAD NAME=SSL://h:1", "only letters"),
            ("A=SSL://h", "no :PORT"),
            ("A=SSL://:9092", "no host"),
            ("A=SSL://h:99999", "0 to 65535"),
            ("A=SSL://h:x", "0 to 65535"),
            ("A=SSL://::1:9092", "in brackets"),
            ("A=SSL://[::1:9092", "lacks its ']'"),
            ("A=SSL://[::1]9092", "no :PORT after"),
        ];
        for (spec, reason) in cases {
            let error = ListenerSpec::parse(spec).unwrap_err().to_string();
            assert!(error.contains(reason), "{spec}: {error}");
            assert!(error.contains(spec), "{spec}: {error}");
        }
    }

    fn listeners(specs: &[&str]) -> Vec<ListenerSpec> {
        specs
            .iter()
            .map(|s| ListenerSpec::parse(s).unwrap())
            .collect()
    }

    #[test]
    fn the_set_is_validated() {
        let all = TlsFilesGiven {
            cert_and_key: true,
            client_ca: true,
        };
        let good = listeners(&[
            "A=PLAINTEXT://127.0.0.1:9092",
            "B=SASL_SSL://0.0.0.0:9093",
            "C=SSL://0.0.0.0:9094",
        ]);
        assert_eq!(validate(&good, all), Ok(()));
        assert_eq!(validate(&[], all), Err(ListenerError::None));
        let names = listeners(&["A=PLAINTEXT://h:1", "A=SSL://h:2"]);
        assert_eq!(
            validate(&names, all),
            Err(ListenerError::DuplicateName("A".into()))
        );
        let ports = listeners(&["A=PLAINTEXT://h:1", "B=SSL://other:1"]);
        assert!(matches!(
            validate(&ports, all),
            Err(ListenerError::DuplicatePort { port: 1, .. })
        ));
        let any_port = listeners(&["A=PLAINTEXT://h:0", "B=SSL://h:0"]);
        assert_eq!(validate(&any_port, all), Ok(()));
        let tls = listeners(&["B=SASL_SSL://h:1"]);
        assert!(matches!(
            validate(&tls, TlsFilesGiven::default()),
            Err(ListenerError::NeedsCertificate { .. })
        ));
        let no_ca = TlsFilesGiven {
            cert_and_key: true,
            client_ca: false,
        };
        assert_eq!(validate(&tls, no_ca), Ok(()));
        let ssl = listeners(&["C=SSL://h:1"]);
        assert_eq!(
            validate(&ssl, no_ca),
            Err(ListenerError::NeedsClientCa { name: "C".into() })
        );
        let many: Vec<String> = (1..=17)
            .map(|i| format!("L{i}=PLAINTEXT://h:{i}"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            validate(&listeners(&many), all),
            Err(ListenerError::TooMany { count: 17 })
        );
        assert_eq!(validate(&listeners(&many[..16]), all), Ok(()));
    }

    #[test]
    fn each_security_protocol_serves_what_it_can_authenticate() {
        use SecurityProtocol::*;
        use WireProtocol::*;
        for security in SecurityProtocol::ALL {
            assert!(
                security.serves(Kafka) && security.serves(Native),
                "{security}"
            );
        }
        assert!(Plaintext.serves(HermitV1) && Ssl.serves(HermitV1));
        assert!(!SaslPlaintext.serves(HermitV1) && !SaslSsl.serves(HermitV1));
        assert_eq!(Ssl.client_auth(), Some(ClientAuth::Required));
        assert_eq!(SaslSsl.client_auth(), Some(ClientAuth::None));
        assert_eq!(Plaintext.client_auth(), None);
        assert!(SaslPlaintext.uses_sasl() && !SaslPlaintext.uses_tls());
    }
}
