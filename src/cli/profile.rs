//! The client configuration file: defaults for the client subcommands' connection flags
//! (`--broker`, `--timeout-ms`, `--reconnect-ms`, the login and TLS flags), so a user does
//! not repeat them.
//!
//! ```toml
//! broker = "mq1.internal:9092"
//! timeout-ms = 5000
//!
//! [profile.staging]           # chosen with --profile staging or PAGURUS_PROFILE
//! broker = "mq-staging:9092"
//! ```
//!
//! The file is `$PAGURUS_CONFIG`, else `$XDG_CONFIG_HOME/pagurus/config.toml`, else
//! `~/.config/pagurus/config.toml`; a missing default file is no error, a missing
//! `$PAGURUS_CONFIG` is. A flag wins over its environment variable, which wins over the
//! file, which wins over the built-in default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Largest configuration file read (it holds a handful of keys).
const FILE_BYTES_MAX: u64 = 1024 * 1024;

/// One set of client settings: the top level of the file, or one `[profile.NAME]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Settings {
    pub broker: Option<String>,
    pub timeout_ms: Option<u64>,
    pub reconnect_ms: Option<u64>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    pub sasl_mechanism: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    // The top level's keys, spelled out: serde's `flatten` cannot deny unknown fields.
    broker: Option<String>,
    timeout_ms: Option<u64>,
    reconnect_ms: Option<u64>,
    user: Option<String>,
    password_file: Option<PathBuf>,
    sasl_mechanism: Option<String>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default)]
    profile: BTreeMap<String, Settings>,
}

/// Where the configuration file is looked for, and whether it must exist.
fn location() -> Option<(PathBuf, bool)> {
    if let Some(path) = std::env::var_os("PAGURUS_CONFIG").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(path), true));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|p| !p.is_empty())
                .map(|home| PathBuf::from(home).join(".config"))
        })?;
    Some((base.join("pagurus").join("config.toml"), false))
}

/// The settings of `profile` (the file's top level if `None`), or none without a file.
pub fn load(profile: Option<&str>) -> Result<Settings, String> {
    let Some((path, required)) = location() else {
        return match profile {
            Some(name) => Err(format!(
                "--profile {name}: no configuration file (set PAGURUS_CONFIG or HOME)"
            )),
            None => Ok(Settings::default()),
        };
    };
    let text = match read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required && profile.is_none() => {
            return Ok(Settings::default());
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    parse(&text, profile).map_err(|e| format!("{}: {e}", path.display()))
}

fn read(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > FILE_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {FILE_BYTES_MAX} bytes"),
        ));
    }
    Ok(text)
}

/// A profile's keys override the top level's.
fn parse(text: &str, profile: Option<&str>) -> Result<Settings, String> {
    let file: File = toml::from_str(text).map_err(|e| e.message().to_string())?;
    let top = Settings {
        broker: file.broker,
        timeout_ms: file.timeout_ms,
        reconnect_ms: file.reconnect_ms,
        user: file.user,
        password_file: file.password_file,
        sasl_mechanism: file.sasl_mechanism,
        tls_ca: file.tls_ca,
        tls_cert: file.tls_cert,
        tls_key: file.tls_key,
    };
    let Some(name) = profile else {
        return Ok(top);
    };
    let Some(chosen) = file.profile.get(name) else {
        let known: Vec<&str> = file.profile.keys().map(String::as_str).collect();
        return Err(format!(
            "no [profile.{name}] (profiles: {})",
            if known.is_empty() {
                String::from("none")
            } else {
                known.join(", ")
            }
        ));
    };
    let chosen = chosen.clone();
    // The login and the TLS files go in groups: a profile that names a user takes its
    // password file from itself too, never another user's from the top level.
    let (user, password_file) = if chosen.user.is_some() || chosen.password_file.is_some() {
        (chosen.user, chosen.password_file)
    } else {
        (top.user, top.password_file)
    };
    let (tls_ca, tls_cert, tls_key) =
        if chosen.tls_ca.is_some() || chosen.tls_cert.is_some() || chosen.tls_key.is_some() {
            (chosen.tls_ca, chosen.tls_cert, chosen.tls_key)
        } else {
            (top.tls_ca, top.tls_cert, top.tls_key)
        };
    Ok(Settings {
        broker: chosen.broker.or(top.broker),
        timeout_ms: chosen.timeout_ms.or(top.timeout_ms),
        reconnect_ms: chosen.reconnect_ms.or(top.reconnect_ms),
        user,
        password_file,
        sasl_mechanism: chosen.sasl_mechanism.or(top.sasl_mechanism),
        tls_ca,
        tls_cert,
        tls_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
broker = "mq1:9092"
timeout-ms = 5000

user = "alice"
password-file = "/etc/pagurus/alice.pw"
tls-ca = "/etc/pagurus/ca.pem"

[profile.staging]
broker = "mq-staging"
reconnect-ms = 0
user = "ops"
"#;

    #[test]
    fn profiles_override_the_top_level() {
        assert_eq!(
            parse(FILE, None).unwrap(),
            Settings {
                broker: Some("mq1:9092".into()),
                timeout_ms: Some(5000),
                reconnect_ms: None,
                user: Some("alice".into()),
                password_file: Some("/etc/pagurus/alice.pw".into()),
                tls_ca: Some("/etc/pagurus/ca.pem".into()),
                ..Settings::default()
            }
        );
        assert_eq!(
            parse(FILE, Some("staging")).unwrap(),
            Settings {
                broker: Some("mq-staging".into()),
                timeout_ms: Some(5000),
                reconnect_ms: Some(0),
                user: Some("ops".into()),
                password_file: None,
                tls_ca: Some("/etc/pagurus/ca.pem".into()),
                ..Settings::default()
            }
        );
        let e = parse(FILE, Some("prod")).unwrap_err();
        assert!(e.contains("no [profile.prod] (profiles: staging)"), "{e}");
    }

    #[test]
    fn typos_and_bad_values_are_refused() {
        let e = parse("brokr = \"x\"\n", None).unwrap_err();
        assert!(e.contains("brokr"), "{e}");
        let e = parse("timeout-ms = \"soon\"\n", None).unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
        assert_eq!(parse("", None).unwrap(), Settings::default());
    }
}
