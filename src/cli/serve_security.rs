//! `pagurus serve`'s security flags: listeners, TLS files, the authorizer.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::security::acl::Principal;
use crate::security::config::{
    AuthorizerKind, KtlsMode, SecurityConfig, SecurityConfigError, TlsFiles,
};
use crate::security::listener::ListenerSpec;

#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// A listener: NAME=SECURITY://HOST:PORT, SECURITY one of PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL (repeat the flag, or separate them with commas in the variable). The first
    /// is the main one (its shard ports follow it); with it, --listen is not given.
    #[arg(long = "listener", env = "PAGURUS_LISTENERS", value_name = "SPEC", value_delimiter = ',', value_parser = parse_listener)]
    pub listeners: Vec<ListenerSpec>,
    /// The broker's certificate chain (PEM), for SSL and SASL_SSL listeners.
    #[arg(long, env = "PAGURUS_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "PAGURUS_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) that signs the client certificates an SSL listener requires.
    #[arg(long, env = "PAGURUS_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Who decides what a principal may do: none (everyone may do everything) or acl
    /// (Kafka's ACLs, deny by default).
    #[arg(long, env = "PAGURUS_AUTHORIZER", value_enum, default_value_t = AuthorizerArg::None)]
    pub authorizer: AuthorizerArg,
    /// Principals the ACL authorizer lets do everything: User:NAME,User:NAME,...
    #[arg(long, env = "PAGURUS_SUPER_USERS", value_name = "LIST", value_delimiter = ',', value_parser = parse_principal)]
    pub super_users: Vec<Principal>,
    /// How long a SASL login holds before the client must authenticate again (KIP-368);
    /// 0: for the life of the connection.
    #[arg(
        long,
        env = "PAGURUS_SASL_SESSION_LIFETIME_MS",
        value_name = "MS",
        default_value_t = 0
    )]
    pub sasl_session_lifetime_ms: u64,
    /// Kernel TLS after the handshake: auto (where the kernel offers the tls ULP, so fetches
    /// over TLS keep sendfile) or off (rustls encrypts in user space).
    #[arg(long, env = "PAGURUS_KTLS", value_enum, default_value_t = KtlsArg::Auto)]
    pub ktls: KtlsArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KtlsArg {
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthorizerArg {
    None,
    Acl,
}

fn parse_listener(s: &str) -> Result<ListenerSpec, String> {
    ListenerSpec::parse(s).map_err(|e| e.to_string())
}

fn parse_principal(s: &str) -> Result<Principal, String> {
    Principal::parse(s).map_err(|e| e.to_string())
}

impl SecurityArgs {
    /// The main listener's address and the security settings, with `listen` (`--listen`)
    /// and its default.
    pub fn config(
        &self,
        listen: Option<std::net::SocketAddr>,
        default_listen: std::net::SocketAddr,
    ) -> Result<(std::net::SocketAddr, SecurityConfig), String> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            }),
            (None, None) if self.tls_client_ca.is_some() => {
                return Err(SecurityConfigError::CaWithoutCert.to_string());
            }
            (None, None) => None,
            _ => return Err(SecurityConfigError::HalfTls.to_string()),
        };
        let (addr, mut config) =
            SecurityConfig::from_flags(listen, default_listen, &self.listeners, tls)
                .map_err(|e| e.to_string())?;
        config.authorizer = match self.authorizer {
            AuthorizerArg::None => AuthorizerKind::None,
            AuthorizerArg::Acl => AuthorizerKind::Acl,
        };
        if !self.super_users.is_empty() && config.authorizer == AuthorizerKind::None {
            return Err(SecurityConfigError::SuperUsersWithoutAuthorizer.to_string());
        }
        config.super_users = self.super_users.clone();
        config.sasl_session_lifetime = (self.sasl_session_lifetime_ms > 0)
            .then(|| Duration::from_millis(self.sasl_session_lifetime_ms));
        config.ktls = match self.ktls {
            KtlsArg::Auto => KtlsMode::Auto,
            KtlsArg::Off => KtlsMode::Off,
        };
        Ok((addr, config))
    }
}
