//! Users and ACLs on a running broker (the security admin apis). A user's credential is
//! derived here from the password, so the password never crosses the network.

use crate::client::ClientError;
use crate::client::blocking::Client;
use crate::client::session;
use crate::protocol::native::{self, Request, UserEntry, WireAcl, WireCredential};
use crate::security::acl::AclBinding;
use crate::security::scram::{ITERATIONS_DEFAULT, Mechanism, ScramCredential};

impl Client {
    /// Every user and, per mechanism, its iterations.
    pub fn list_users(&mut self) -> Result<Vec<UserEntry>, ClientError> {
        self.call(&Request::ListUsers)?;
        native::decode_list_users_response(self.body()).map_err(session::protocol)
    }

    /// Creates user `name` (or replaces its credentials) for `mechanisms`, from `password`.
    pub fn set_user(
        &mut self,
        name: &str,
        password: &[u8],
        mechanisms: &[Mechanism],
    ) -> Result<(), ClientError> {
        let credentials = mechanisms
            .iter()
            .map(|m| ScramCredential::generate(*m, password, ITERATIONS_DEFAULT))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::Invalid(format!("cannot make the credential: {e}")))?;
        let wire: Vec<WireCredential<'_>> = credentials
            .iter()
            .map(|c| WireCredential {
                mechanism: c.mechanism.name().as_bytes(),
                iterations: c.iterations,
                salt: &c.salt,
                stored_key: &c.stored_key,
                server_key: &c.server_key,
            })
            .collect();
        self.call(&Request::SetUser {
            name: name.as_bytes(),
            credentials: wire,
        })
    }

    /// Deletes user `name`; false if there was none.
    pub fn delete_user(&mut self, name: &str) -> Result<bool, ClientError> {
        self.call(&Request::DeleteUser {
            name: name.as_bytes(),
        })?;
        native::decode_flag_response(self.body()).map_err(session::protocol)
    }

    /// Every ACL, each part as its name.
    pub fn list_acls(&mut self) -> Result<Vec<WireAcl<String>>, ClientError> {
        self.call(&Request::ListAcls)?;
        native::decode_list_acls_response(self.body()).map_err(session::protocol)
    }

    /// Adds (`add`) or removes one ACL; false if that changed nothing.
    pub fn change_acl(&mut self, add: bool, acl: &AclBinding) -> Result<bool, ClientError> {
        let name = |s: &'static str| s.as_bytes();
        let (principal, host) = (acl.principal.to_string(), acl.host.to_string());
        let wire = WireAcl {
            resource_type: name(acl.pattern.resource_type.name()),
            pattern_type: name(acl.pattern.pattern_type.name()),
            name: acl.pattern.name.as_bytes(),
            principal: principal.as_bytes(),
            host: host.as_bytes(),
            operation: name(acl.operation.name()),
            permission: name(acl.permission.name()),
        };
        self.call(&Request::ChangeAcl { add, acl: wire })?;
        native::decode_flag_response(self.body()).map_err(session::protocol)
    }
}
