//! The client subcommands' TLS and login flags (`--tls-ca`, `--user`, ...): how the CLI
//! reaches a listener that encrypts (SSL, SASL_SSL) or asks for a login (SASL_PLAINTEXT,
//! SASL_SSL). The password is read from a file, never taken on the command line, where
//! `ps` and shell history would show it.

use std::path::{Path, PathBuf};

use crate::client::secure::{ConnectOptions, Login, tls_config};
use crate::security::scram::Mechanism;

/// Largest password file read (a password is a line).
const PASSWORD_FILE_BYTES_MAX: u64 = 4096;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connection")]
pub struct ClientSecurityArgs {
    /// Log in as this user (SCRAM), for a SASL listener; needs --password-file.
    #[arg(long, global = true, env = "PAGURUS_USER", value_name = "NAME")]
    pub user: Option<String>,
    /// File whose first line is the user's password.
    #[arg(
        long,
        global = true,
        env = "PAGURUS_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub password_file: Option<PathBuf>,
    /// SCRAM mechanism of the login.
    #[arg(long, global = true, env = "PAGURUS_SASL_MECHANISM", default_value = "SCRAM-SHA-512",
        value_parser = ["SCRAM-SHA-256", "SCRAM-SHA-512"], value_name = "NAME")]
    pub sasl_mechanism: String,
    /// Connect with TLS, trusting brokers this CA (PEM) signed.
    #[arg(
        long,
        global = true,
        env = "PAGURUS_CLIENT_TLS_CA",
        value_name = "FILE"
    )]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM), for an SSL listener; needs --tls-key and --tls-ca.
    #[arg(
        long,
        global = true,
        env = "PAGURUS_CLIENT_TLS_CERT",
        value_name = "FILE"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "PAGURUS_CLIENT_TLS_KEY",
        value_name = "FILE"
    )]
    pub tls_key: Option<PathBuf>,
}

impl ClientSecurityArgs {
    /// True when a flag asks for TLS or a login.
    pub fn any(&self) -> bool {
        self.user.is_some()
            || self.password_file.is_some()
            || self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
    }

    /// The connection options the flags ask for, with their files read and checked.
    pub fn options(&self) -> Result<ConnectOptions, String> {
        let identity = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key go together".to_string()),
        };
        let tls = match (&self.tls_ca, identity) {
            (Some(ca), identity) => Some(tls_config(ca, identity).map_err(|e| e.to_string())?),
            (None, Some(_)) => {
                return Err("--tls-cert needs --tls-ca (the CA that signed the broker)".into());
            }
            (None, None) => None,
        };
        let login = match (&self.user, &self.password_file) {
            (Some(user), Some(file)) => Some(Login {
                user: user.clone(),
                password: read_password(file)?,
                mechanism: Mechanism::from_name(&self.sasl_mechanism)
                    .ok_or_else(|| format!("unknown mechanism {}", self.sasl_mechanism))?,
            }),
            (None, None) => None,
            (Some(_), None) => return Err("--user needs --password-file".to_string()),
            (None, Some(_)) => return Err("--password-file needs --user".to_string()),
        };
        Ok(ConnectOptions { tls, login })
    }
}

/// The first line of `path`, without its line end. An empty password is refused.
fn read_password(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(PASSWORD_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > PASSWORD_FILE_BYTES_MAX {
        return Err(format!(
            "{}: over {PASSWORD_FILE_BYTES_MAX} bytes: not a password file",
            path.display()
        ));
    }
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err(format!(
            "{}: the first line (the password) is empty",
            path.display()
        ));
    }
    Ok(line.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\r\nignored\n").unwrap();
        assert_eq!(read_password(&path).unwrap(), b"s3cret");
        std::fs::write(&path, "\nlater").unwrap();
        assert!(read_password(&path).unwrap_err().contains("empty"));
        std::fs::write(&path, vec![b'x'; 5000]).unwrap();
        assert!(
            read_password(&path)
                .unwrap_err()
                .contains("not a password file")
        );
    }
}
