//! `pagurus users create|delete|list`. With `--data-dir`, offline: on the data directory
//! itself, while the broker is not running (it refuses while the broker holds the
//! directory's lock); this is how the first user, the superuser, is made before the first
//! start. Without it, online: through the broker at `--broker`, logged in as the
//! connection flags say (`security_online`).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::cli::{BrokerArgs, Output, print_json, print_out, table};
use crate::security::plain::FIELD_BYTES_MAX;
use crate::security::scram::{ITERATIONS_DEFAULT, Mechanism, ScramCredential};
use crate::security::users::Users;

#[derive(Debug, Args)]
pub struct UsersArgs {
    #[command(subcommand)]
    pub command: UsersCommand,
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create a user with the password read from stdin (stored as SCRAM salted hashes).
    Create {
        /// User name: 1-255 bytes, no whitespace or control characters.
        name: String,
        #[command(flatten)]
        dir: DataDir,
        /// Read the password from stdin (one line; the only way, so that it is never in
        /// the process list or the shell history).
        #[arg(long)]
        password_stdin: bool,
        /// Store a credential for this mechanism only; both if not given.
        #[arg(long, value_enum, ignore_case = true)]
        mechanism: Option<MechanismArg>,
        #[command(flatten)]
        target: BrokerArgs,
    },
    /// Delete a user and all its credentials.
    Delete {
        /// User name.
        name: String,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        target: BrokerArgs,
    },
    /// Print every user and the mechanisms it has credentials for.
    List {
        #[command(flatten)]
        dir: DataDir,
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        target: BrokerArgs,
    },
}

impl UsersCommand {
    pub(super) fn target(&mut self) -> &mut BrokerArgs {
        match self {
            UsersCommand::Create { target, .. }
            | UsersCommand::Delete { target, .. }
            | UsersCommand::List { target, .. } => target,
        }
    }
}

#[derive(Debug, Args)]
pub struct DataDir {
    /// Work offline on this stopped broker's data directory; without it, online through
    /// --broker.
    #[arg(long, env = "PAGURUS_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MechanismArg {
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
}

impl From<MechanismArg> for Mechanism {
    fn from(arg: MechanismArg) -> Mechanism {
        match arg {
            MechanismArg::ScramSha256 => Mechanism::ScramSha256,
            MechanismArg::ScramSha512 => Mechanism::ScramSha512,
        }
    }
}

/// The broker's lock file in the data directory (the broker holds an exclusive flock on it
/// while it runs).
const LOCK_FILE: &str = ".lock";

pub fn run(args: UsersArgs) -> Result<(), String> {
    use super::security_online as online;
    match args.command {
        UsersCommand::Create {
            name,
            dir,
            password_stdin,
            mechanism,
            target,
        } => {
            let password = password(&name, password_stdin)?;
            let mechanisms = mechanism.map_or(Mechanism::ALL.to_vec(), |m| vec![m.into()]);
            match dir.data_dir {
                Some(data_dir) => create(&name, &data_dir, &password, &mechanisms),
                None => online::create_user(&target, &name, &password, &mechanisms),
            }
        }
        UsersCommand::Delete { name, dir, target } => match dir.data_dir {
            Some(data_dir) => delete(&name, &data_dir),
            None => online::delete_user(&target, &name),
        },
        UsersCommand::List {
            dir,
            output,
            target,
        } => match dir.data_dir {
            Some(data_dir) => list(&data_dir, output),
            None => online::list_users(&target, output),
        },
    }
}

/// The new user's password, from stdin; the name checked first.
fn password(name: &str, password_stdin: bool) -> Result<Vec<u8>, String> {
    if !password_stdin {
        return Err(
            "give the password on stdin with --password-stdin (never as an argument, \
            where the process list and the shell history would show it)"
                .to_string(),
        );
    }
    crate::security::check_user_name(name).map_err(|e| e.to_string())?;
    read_password(std::io::stdin().lock())
}

fn create(
    name: &str,
    data_dir: &Path,
    password: &[u8],
    mechanisms: &[Mechanism],
) -> Result<(), String> {
    // As `serve` does, before anything is written: make the directory durably, refuse one
    // of someone else's files, mark a new one, then lock it.
    crate::storage::fs::prepare_data_dir(data_dir)
        .map_err(|e| format!("cannot prepare the data directory: {e}"))?;
    crate::storage::marker::check_and_mark(data_dir).map_err(|e| e.to_string())?;
    let _lock = lock(data_dir, true)?;
    let mut users = Users::load_or_create(data_dir).map_err(|e| e.to_string())?;
    for &m in mechanisms {
        let credential = ScramCredential::generate(m, password, ITERATIONS_DEFAULT)
            .map_err(|e| e.to_string())?;
        users.create(name, credential).map_err(|e| e.to_string())?;
    }
    users.save(data_dir).map_err(|e| e.to_string())?;
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    print_out(&format!("created user {name} ({})\n", names.join(", ")))
}

fn delete(name: &str, data_dir: &Path) -> Result<(), String> {
    let _lock = lock(data_dir, false)?;
    let mut users = load(data_dir)?;
    users.delete(name).map_err(|e| e.to_string())?;
    users.save(data_dir).map_err(|e| e.to_string())?;
    print_out(&format!("deleted user {name}\n"))
}

fn list(data_dir: &Path, output: Output) -> Result<(), String> {
    let _lock = lock(data_dir, false)?;
    let users = load(data_dir)?;
    let rows: Vec<(String, Vec<String>)> = users
        .list()
        .map(|(name, ms)| {
            let ms = ms.iter().map(|m| m.name().to_string()).collect();
            (name.to_string(), ms)
        })
        .collect();
    print(&rows, output)
}

/// Prints users and their mechanisms, the same offline and online.
pub(super) fn print(rows: &[(String, Vec<String>)], output: Output) -> Result<(), String> {
    match output {
        Output::Json => print_json(&json!(
            rows.iter()
                .map(|(name, ms)| json!({ "name": name, "mechanisms": ms }))
                .collect::<Vec<_>>()
        )),
        Output::Text => {
            let rows: Vec<Vec<String>> = rows
                .iter()
                .map(|(name, ms)| vec![name.clone(), ms.join(",")])
                .collect();
            print_out(&table(&["NAME", "MECHANISMS"], &rows))
        }
    }
}

/// The users of `data_dir`; an error when it has no users file.
fn load(data_dir: &Path) -> Result<Users, String> {
    Users::load(data_dir).map_err(|e| e.to_string())?.ok_or_else(|| {
        format!(
            "{} has no users: create one with `pagurus users create NAME --data-dir {} --password-stdin`",
            data_dir.display(),
            data_dir.display()
        )
    })
}

/// Takes the data directory's lock, as the broker does at start, so the broker and this
/// command never change the users file at once. `create_file`: make the lock file if it is
/// missing (a new data directory); otherwise a missing one means no broker ever ran.
pub(super) fn lock(
    data_dir: &Path,
    create_file: bool,
) -> Result<Option<nix::fcntl::Flock<File>>, String> {
    if !data_dir.is_dir() {
        return Err(format!("{} is not a directory", data_dir.display()));
    }
    let path = data_dir.join(LOCK_FILE);
    let file = if create_file {
        File::create(&path)
    } else {
        File::open(&path)
    };
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create_file => return Ok(None),
        Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
    };
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map(Some)
        .map_err(|_| {
            format!(
                "the broker is running on {} (it holds {}): change it online, without --data-dir (and PAGURUS_DATA_DIR), or stop it first",
                data_dir.display(),
                path.display()
            )
        })
}

/// The password: stdin's first line without its line end, at most [`FIELD_BYTES_MAX`]
/// bytes (SASL PLAIN's limit, so every user can also log in with PLAIN).
fn read_password(input: impl Read) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::with_capacity(FIELD_BYTES_MAX + 2);
    input
        .take(FIELD_BYTES_MAX as u64 + 3)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the password from stdin: {e}"))?;
    let line = match bytes.iter().position(|b| *b == b'\n') {
        Some(end) => &bytes[..end],
        None => &bytes[..],
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err("the password read from stdin is empty".to_string());
    }
    if line.len() > FIELD_BYTES_MAX {
        return Err(format!(
            "the password is over {FIELD_BYTES_MAX} bytes (SASL PLAIN's limit)"
        ));
    }
    if line.contains(&0) {
        return Err("the password holds a NUL byte, which SASL PLAIN cannot carry".to_string());
    }
    Ok(line.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_the_first_line() {
        assert_eq!(read_password(&b"s3cret\n"[..]).unwrap(), b"s3cret");
        assert_eq!(read_password(&b"s3cret\r\nmore"[..]).unwrap(), b"s3cret");
        assert_eq!(read_password(&b"no newline"[..]).unwrap(), b"no newline");
        assert!(read_password(&b"\n"[..]).unwrap_err().contains("empty"));
        assert!(read_password(&b"a\0b"[..]).unwrap_err().contains("NUL"));
        let long = vec![b'p'; FIELD_BYTES_MAX + 1];
        assert!(read_password(&long[..]).unwrap_err().contains("over 255"));
        assert_eq!(read_password(&long[1..]).unwrap().len(), FIELD_BYTES_MAX);
    }
}
