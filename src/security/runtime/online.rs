//! Changes of the ACLs and the users while the broker runs (Kafka's CreateAcls, DeleteAcls
//! and AlterUserScramCredentials). One change at a time, broker-wide: a std mutex taken on
//! the blocking pool, never on a core, so a core never waits for another's fsync. The new
//! file is written durably first; only then is the new state published (`ArcSwap::store`)
//! and seen by every session at its next request. A failed write publishes nothing: the
//! old file and the old state stay, and the caller gets the error.

use std::sync::{Arc, MutexGuard};

use super::Security;
use crate::security::acl::{Acls, Authorizer};
use crate::security::store::StoreError;
use crate::security::users::{Users, UsersError};

/// Why an online change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The broker runs without `--authorizer acl`: there are no ACLs to change online.
    #[error("no authorizer: the broker runs without --authorizer acl")]
    NoAuthorizer,
    #[error("the ACL file was not written, nothing changed: {0}")]
    Acls(#[from] StoreError),
    #[error("the users file was not written, nothing changed: {0}")]
    Users(#[from] UsersError),
}

impl Security {
    /// The authorizer as it is now (its bindings and super users); `None` without one.
    pub fn authorizer(&self) -> Option<Arc<Authorizer>> {
        self.authorizer.as_ref().map(|a| a.load_full())
    }

    /// Applies `change` to the current ACLs; when they differ after it, writes the ACL file
    /// and publishes them. Returns what `change` returned.
    pub async fn change_acls<R: Send + 'static>(
        self: &Arc<Self>,
        change: impl FnOnce(&mut Acls) -> R + Send + 'static,
    ) -> Result<R, ChangeError> {
        let security = Arc::clone(self);
        glommio::executor()
            .spawn_blocking(move || security.change_acls_now(change))
            .await
    }

    /// Applies `change` to the current users; when they differ after it, writes the users
    /// file and publishes them. Returns what `change` returned.
    pub async fn change_users<R: Send + 'static>(
        self: &Arc<Self>,
        change: impl FnOnce(&mut Users) -> R + Send + 'static,
    ) -> Result<R, ChangeError> {
        let security = Arc::clone(self);
        glommio::executor()
            .spawn_blocking(move || security.change_users_now(change))
            .await
    }

    /// [`Security::change_acls`] on this thread (blocks: a blocking-pool thread only).
    fn change_acls_now<R>(&self, change: impl FnOnce(&mut Acls) -> R) -> Result<R, ChangeError> {
        let swap = self.authorizer.as_ref().ok_or(ChangeError::NoAuthorizer)?;
        let _one_at_a_time = self.lock_changes();
        let current = swap.load_full();
        let mut acls = current.acls().clone();
        let out = change(&mut acls);
        if acls != *current.acls() {
            acls.save(&self.data_dir)?;
            swap.store(Arc::new(current.with_acls(acls)));
        }
        Ok(out)
    }

    /// [`Security::change_users`] on this thread (blocks: a blocking-pool thread only).
    fn change_users_now<R>(&self, change: impl FnOnce(&mut Users) -> R) -> Result<R, ChangeError> {
        let _one_at_a_time = self.lock_changes();
        let current = self.users.load_full();
        let mut users = Users::clone(&current);
        let out = change(&mut users);
        if users != *current {
            users.save(&self.data_dir)?;
            self.users.store(Arc::new(users));
        }
        Ok(out)
    }

    fn lock_changes(&self) -> MutexGuard<'_, ()> {
        // The mutex guards no data, only the order of changes: a change that panicked
        // published nothing, so a poisoned lock is still good to take.
        self.changes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::{
        AclBinding, Host, Operation, PatternType, Permission, Principal, ResourcePattern,
        ResourceType,
    };
    use crate::security::config::{AuthorizerKind, SecurityConfig};
    use crate::security::scram::{Mechanism, ScramCredential};
    use crate::security::store::security_dir;

    use crate::on_executor::run;

    fn write_orders() -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::new(ResourceType::Topic, PatternType::Literal, "orders")
                .unwrap(),
            principal: Principal::user("alice"),
            host: Host::Any,
            operation: Operation::Write,
            permission: Permission::Allow,
        }
    }

    fn open(data: &std::path::Path, authorizer: AuthorizerKind) -> Arc<Security> {
        let config = SecurityConfig {
            authorizer,
            ..SecurityConfig::default()
        };
        Arc::new(Security::open(&config, data).unwrap())
    }

    #[test]
    fn an_acl_change_is_written_then_seen() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let security = open(&data, AuthorizerKind::Acl);
        let alice = Principal::user("alice");
        let need = crate::security::acl::actions::Need::On(
            ResourceType::Topic,
            Operation::Write,
            crate::security::acl::actions::Denied::Item,
        );
        let host = "127.0.0.1".parse().unwrap();
        assert!(!security.meets(&alice, host, need, "orders"));
        let changed = Arc::clone(&security);
        let added = run(async move || changed.change_acls(|acls| acls.add(write_orders())).await);
        assert_eq!(added.unwrap(), Ok(true));
        assert!(security.meets(&alice, host, need, "orders"));
        assert_eq!(Acls::load(&data).unwrap().len(), 1);
        // A write that fails leaves the file and the ACLs in force as they were: the
        // security directory is moved away and a plain file takes its name (which fails
        // the write for root too).
        let sec_dir = security_dir(&data);
        let aside = data.join("security.aside");
        std::fs::rename(&sec_dir, &aside).unwrap();
        std::fs::write(&sec_dir, b"not a directory").unwrap();
        let changed = Arc::clone(&security);
        let removed = run(async move || {
            changed
                .change_acls(|acls| acls.remove(&write_orders()))
                .await
        });
        assert!(matches!(removed, Err(ChangeError::Acls(_))), "{removed:?}");
        assert!(security.meets(&alice, host, need, "orders"));
        std::fs::remove_file(&sec_dir).unwrap();
        std::fs::rename(&aside, &sec_dir).unwrap();
        assert_eq!(Acls::load(&data).unwrap().len(), 1);
    }

    #[test]
    fn without_an_authorizer_acls_do_not_change_online_but_users_do() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let security = open(&data, AuthorizerKind::None);
        let changed = Arc::clone(&security);
        let refused = run(async move || changed.change_acls(|acls| acls.len()).await);
        assert!(matches!(refused, Err(ChangeError::NoAuthorizer)));
        let changed = Arc::clone(&security);
        run(async move || {
            changed
                .change_users(|users| {
                    let credential =
                        ScramCredential::generate(Mechanism::ScramSha256, b"pw", 4096).unwrap();
                    users.set("bob", credential)
                })
                .await
        })
        .unwrap()
        .unwrap();
        assert!(
            security
                .users()
                .credential("bob", Mechanism::ScramSha256)
                .is_some()
        );
        let loaded = Users::load(&data).unwrap().unwrap();
        assert_eq!(loaded, *security.users());
        // A users file that cannot be written: no new user, for logins or in the file.
        let sec_dir = security_dir(&data);
        let aside = data.join("security.aside");
        std::fs::rename(&sec_dir, &aside).unwrap();
        std::fs::write(&sec_dir, b"not a directory").unwrap();
        let changed = Arc::clone(&security);
        let refused = run(async move || {
            changed
                .change_users(|users| users.remove_credential("bob", Mechanism::ScramSha256))
                .await
        });
        assert!(matches!(refused, Err(ChangeError::Users(_))), "{refused:?}");
        assert_eq!(loaded, *security.users());
        std::fs::remove_file(&sec_dir).unwrap();
        std::fs::rename(&aside, &sec_dir).unwrap();
        assert_eq!(Users::load(&data).unwrap().unwrap(), loaded);
    }
}
