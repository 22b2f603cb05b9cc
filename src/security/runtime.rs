//! The broker's security state at run time, shared by every core: the TLS server
//! configurations (replaced whole on SIGHUP), the users (credentials) and the authorizer.
//! Each is an `ArcSwap`: a session reads the current one without a lock, and a change
//! (a reload, an ACL added) is seen by every session at its next request. Online changes of
//! the ACLs and users are in [`online`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, ArcSwapOption};
use rustls::ServerConfig;

use super::acl::actions::Need;
use super::acl::{Acls, Authorizer, Principal};
use super::config::{AuthorizerKind, SecurityConfig};
use super::listener::SecurityProtocol;
use super::store::StoreError;
use super::tls::ktls::KtlsSupport;
use super::tls::{ClientAuth, TlsConfig, TlsError};
use super::users::{Users, UsersError};

mod online;
pub use online::ChangeError;

/// Why the broker cannot start with its security settings.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("users: {0}")]
    Users(#[from] UsersError),
    #[error("ACLs: {0}")]
    Acls(#[from] StoreError),
}

/// The rustls configurations of the TLS listeners.
struct ServerConfigs {
    /// SSL listeners: a client certificate is required.
    ssl: Option<Arc<ServerConfig>>,
    /// SASL_SSL listeners: no client certificate asked for.
    sasl_ssl: Arc<ServerConfig>,
}

pub struct Security {
    config: SecurityConfig,
    tls: ArcSwapOption<ServerConfigs>,
    users: ArcSwap<Users>,
    authorizer: Option<ArcSwap<Authorizer>>,
    ktls: KtlsSupport,
    data_dir: PathBuf,
    /// Online changes of the users or the ACLs, one at a time ([`online`]).
    changes: Mutex<()>,
}

impl Security {
    /// Loads what `config` names: the TLS files (refused at start with the path and the
    /// reason), the users file (made when a listener authenticates by SASL and there is
    /// none, so that the fake salts of unknown users stay the same across restarts) and the
    /// ACL file.
    pub fn open(config: &SecurityConfig, data_dir: &Path) -> Result<Security, SecurityError> {
        let ktls = KtlsSupport::for_mode(config.ktls);
        let tls = config
            .tls
            .as_ref()
            .map(|files| load_tls(files, ktls.is_available()))
            .transpose()?;
        let users = if config.uses_sasl() {
            Users::load_or_create(data_dir)?
        } else {
            Users::load(data_dir)?.map_or_else(Users::new, Ok)?
        };
        let authorizer = match config.authorizer {
            AuthorizerKind::None => None,
            AuthorizerKind::Acl => {
                let acls = Acls::load(data_dir)?;
                let authorizer = Authorizer::new(acls, config.super_users.iter().cloned());
                Some(ArcSwap::from_pointee(authorizer))
            }
        };
        Ok(Security {
            config: config.clone(),
            tls: ArcSwapOption::new(tls.map(Arc::new)),
            users: ArcSwap::from_pointee(users),
            authorizer,
            ktls,
            data_dir: data_dir.to_path_buf(),
            changes: Mutex::new(()),
        })
    }

    /// No TLS, no users, no authorizer: everyone may do everything (tests of the shard).
    pub fn open_to_all() -> Security {
        Security {
            config: SecurityConfig::default(),
            tls: ArcSwapOption::empty(),
            users: ArcSwap::from_pointee(Users::empty()),
            authorizer: None,
            ktls: KtlsSupport::Unavailable {
                reason: "no TLS".to_string(),
            },
            data_dir: PathBuf::new(),
            changes: Mutex::new(()),
        }
    }

    pub fn config(&self) -> &SecurityConfig {
        &self.config
    }

    pub fn ktls(&self) -> &KtlsSupport {
        &self.ktls
    }

    /// The rustls configuration a listener of this kind handshakes with; `None` for one
    /// without TLS.
    pub fn tls_config(&self, security: SecurityProtocol) -> Option<Arc<ServerConfig>> {
        let configs = self.tls.load();
        let configs = configs.as_ref()?;
        match security.client_auth()? {
            ClientAuth::Required => configs.ssl.clone(),
            ClientAuth::None => Some(Arc::clone(&configs.sasl_ssl)),
        }
    }

    /// Reads the TLS files again (SIGHUP): new connections handshake with them, open ones
    /// keep theirs. A bad file leaves the old configuration in place.
    pub fn reload_tls(&self) -> Result<(), TlsError> {
        let Some(files) = &self.config.tls else {
            return Ok(());
        };
        let configs = load_tls(files, self.ktls.is_available())?;
        self.tls.store(Some(Arc::new(configs)));
        Ok(())
    }

    /// The users as they are now.
    pub fn users(&self) -> Arc<Users> {
        self.users.load_full()
    }

    /// True when an authorizer decides (`--authorizer acl`).
    pub fn authorizes(&self) -> bool {
        self.authorizer.is_some()
    }

    /// True when `principal` from `host` meets `need` on the resource `name`; always true
    /// without an authorizer.
    pub fn meets(&self, principal: &Principal, host: IpAddr, need: Need, name: &str) -> bool {
        match &self.authorizer {
            None => true,
            Some(authorizer) => authorizer.load().meets(principal, host, need, name),
        }
    }

    /// True when `principal` is a super user of the ACL authorizer.
    pub fn is_super_user(&self, principal: &Principal) -> bool {
        self.authorizer
            .as_ref()
            .is_some_and(|a| a.load().is_super_user(principal))
    }

    /// Where the data directory is (the users and ACL files live under it).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

/// `ktls`: the connections will try kernel TLS after their handshake.
fn load_tls(files: &super::config::TlsFiles, ktls: bool) -> Result<ServerConfigs, TlsError> {
    let tls = TlsConfig::load(&files.cert, &files.key, files.client_ca.as_deref())?;
    let ssl = match files.client_ca {
        Some(_) => Some(tls.server_config(ClientAuth::Required, ktls)?),
        None => None,
    };
    Ok(ServerConfigs {
        ssl,
        sasl_ssl: tls.server_config(ClientAuth::None, ktls)?,
    })
}
