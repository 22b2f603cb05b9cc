//! The users file, `<data-dir>/security/users`: each user's SCRAM credentials (salt,
//! iterations, StoredKey, ServerKey per mechanism; never a password) and the secret from
//! which unknown users' fake salts are derived. A checked text file ([`super::store`]):
//!
//! ```text
//! # users of a pagurus broker, written by its users command; do not edit
//! format 1
//! secret <base64 32 bytes>
//! user <name> <mechanism> <iterations> <salt> <stored-key> <server-key>   (base64)
//! crc32c <hex of every byte above>
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;

use super::scram::server::{SERVER_SECRET_BYTES, ServerSecret};
use super::scram::{Mechanism, ScramCredential, ScramError};
use super::store::{self, StoreError, security_dir};
use super::{UserNameError, check_user_name};

/// The users file's name in `<data-dir>/security/`.
pub const USERS_FILE: &str = "users";
/// Most users (a line each; Kafka deployments have tens to thousands).
pub const USERS_MAX: usize = 10_000;
/// Largest users file read: [`USERS_MAX`] users with both mechanisms, each line well
/// under 1 KiB.
const USERS_FILE_BYTES_MAX: u64 = 2 * USERS_MAX as u64 * 1024 + 4096;
/// The format this pagurus writes and reads.
const FORMAT: u32 = 1;

/// Why a user change or the users file is refused.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    BadName(#[from] UserNameError),
    #[error("user {user:?} already has a {mechanism} credential")]
    Exists { user: String, mechanism: Mechanism },
    #[error("there is no user {user:?}")]
    NoSuchUser { user: String },
    #[error("there are already {USERS_MAX} users, the limit")]
    TooMany,
    #[error("cannot make the credential: {0}")]
    Credential(#[from] ScramError),
}

/// Every user's credentials, and the fake-salt secret.
#[derive(Debug, Clone)]
pub struct Users {
    secret: ServerSecret,
    users: BTreeMap<String, BTreeMap<Mechanism, ScramCredential>>,
}

impl Users {
    /// No users, and a new random secret.
    pub fn new() -> Result<Users, UsersError> {
        Ok(Users {
            secret: ServerSecret::generate()?,
            users: BTreeMap::new(),
        })
    }

    /// No users and an all-zero secret: for a broker that authenticates no one.
    pub fn empty() -> Users {
        Users {
            secret: ServerSecret::from_bytes([0; super::scram::server::SERVER_SECRET_BYTES]),
            users: BTreeMap::new(),
        }
    }

    /// Reads `<data-dir>/security/users`; `None` when there is none.
    pub fn load(data_dir: &Path) -> Result<Option<Users>, UsersError> {
        let dir = security_dir(data_dir);
        let Some(body) = store::read_checked(&dir, USERS_FILE, USERS_FILE_BYTES_MAX)? else {
            return Ok(None);
        };
        let path = dir.join(USERS_FILE);
        parse(&body)
            .map(Some)
            .map_err(|reason| StoreError::corrupt(&path, reason).into())
    }

    /// Reads the users file, or writes a new empty one (so the fake-salt secret stays the
    /// same from now on) when there is none.
    pub fn load_or_create(data_dir: &Path) -> Result<Users, UsersError> {
        if let Some(users) = Users::load(data_dir)? {
            return Ok(users);
        }
        let users = Users::new()?;
        users.save(data_dir)?;
        Ok(users)
    }

    /// Replaces the users file with this, durably.
    pub fn save(&self, data_dir: &Path) -> Result<(), UsersError> {
        Ok(store::write_checked(data_dir, USERS_FILE, &self.encode())?)
    }

    pub fn secret(&self) -> &ServerSecret {
        &self.secret
    }

    /// The user's credential for `mechanism`, if any.
    pub fn credential(&self, user: &str, mechanism: Mechanism) -> Option<&ScramCredential> {
        self.users.get(user)?.get(&mechanism)
    }

    /// Every user, sorted, with the mechanisms each has a credential for.
    pub fn list(&self) -> impl Iterator<Item = (&str, Vec<Mechanism>)> {
        self.users
            .iter()
            .map(|(name, creds)| (name.as_str(), creds.keys().copied().collect()))
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Adds `user`'s credential; refused if the user already has one for that mechanism.
    pub fn create(&mut self, user: &str, credential: ScramCredential) -> Result<(), UsersError> {
        if self.credential(user, credential.mechanism).is_some() {
            return Err(UsersError::Exists {
                user: user.to_string(),
                mechanism: credential.mechanism,
            });
        }
        self.set(user, credential)
    }

    /// Adds or replaces `user`'s credential for its mechanism.
    pub fn set(&mut self, user: &str, credential: ScramCredential) -> Result<(), UsersError> {
        check_user_name(user)?;
        credential.validate()?;
        if !self.users.contains_key(user) && self.users.len() >= USERS_MAX {
            return Err(UsersError::TooMany);
        }
        let creds = self.users.entry(user.to_string()).or_default();
        creds.insert(credential.mechanism, credential);
        Ok(())
    }

    /// Removes `user` and all its credentials.
    pub fn delete(&mut self, user: &str) -> Result<(), UsersError> {
        match self.users.remove(user) {
            Some(_) => Ok(()),
            None => Err(UsersError::NoSuchUser {
                user: user.to_string(),
            }),
        }
    }

    fn encode(&self) -> String {
        let mut out = format!(
            "# users of a pagurus broker, written by its users command; do not edit\nformat {FORMAT}\nsecret {}\n",
            b64(self.secret.as_bytes())
        );
        for (name, creds) in &self.users {
            for c in creds.values() {
                out.push_str(&format!(
                    "user {name} {} {} {} {} {}\n",
                    c.mechanism,
                    c.iterations,
                    b64(&c.salt),
                    b64(&c.stored_key),
                    b64(&c.server_key)
                ));
            }
        }
        out
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The users of a checked body; an error names the line.
fn parse(body: &str) -> Result<Users, String> {
    let (mut format, mut secret) = (None, None);
    let mut users = BTreeMap::<String, BTreeMap<Mechanism, ScramCredential>>::new();
    for (n, line) in body.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}", n + 1);
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            [] | [""] => {}
            [first, ..] if first.starts_with('#') => {}
            ["format", v] => format = Some(v.parse::<u32>().map_err(|e| at(e.to_string()))?),
            ["secret", v] => secret = Some(parse_secret(v).map_err(at)?),
            ["user", name, rest @ ..] => {
                let credential = parse_credential(rest).map_err(at)?;
                check_user_name(name).map_err(|e| at(e.to_string()))?;
                if users.len() >= USERS_MAX && !users.contains_key(*name) {
                    return Err(at(format!("more than {USERS_MAX} users")));
                }
                let creds = users.entry(name.to_string()).or_default();
                if creds.insert(credential.mechanism, credential).is_some() {
                    return Err(at(format!(
                        "a second credential of {name:?} for one mechanism"
                    )));
                }
            }
            _ => return Err(at(format!("unexpected line {:?}", truncated(line)))),
        }
    }
    match format {
        Some(FORMAT) => {}
        Some(other) => return Err(format!("format {other}; this pagurus reads {FORMAT}")),
        None => return Err("no format line".to_string()),
    }
    let secret = secret.ok_or("no secret line")?;
    Ok(Users { secret, users })
}

fn parse_secret(text: &str) -> Result<ServerSecret, String> {
    let bytes = unb64(text)?;
    let bytes: [u8; SERVER_SECRET_BYTES] = bytes.try_into().map_err(|b: Vec<u8>| {
        format!("a secret of {} bytes, not {SERVER_SECRET_BYTES}", b.len())
    })?;
    Ok(ServerSecret::from_bytes(bytes))
}

fn parse_credential(fields: &[&str]) -> Result<ScramCredential, String> {
    let [mechanism, iterations, salt, stored, server] = fields else {
        return Err(format!(
            "a user line has 7 fields, not {}",
            fields.len() + 2
        ));
    };
    let credential = ScramCredential {
        mechanism: Mechanism::from_name(mechanism)
            .ok_or_else(|| format!("unknown mechanism {:?}", truncated(mechanism)))?,
        iterations: iterations
            .parse()
            .map_err(|e| format!("iterations {iterations:?}: {e}"))?,
        salt: unb64(salt)?,
        stored_key: unb64(stored)?,
        server_key: unb64(server)?,
    };
    credential.validate().map_err(|e| e.to_string())?;
    Ok(credential)
}

fn unb64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("{:?} is not base64: {e}", truncated(text)))
}

/// At most 64 bytes of `text`, for an error message.
fn truncated(text: &str) -> &str {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(mechanism: Mechanism, password: &str) -> ScramCredential {
        ScramCredential::generate(mechanism, password.as_bytes(), 4096).unwrap()
    }

    #[test]
    fn users_survive_a_save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Users::load(dir.path()).unwrap().is_none());
        let mut users = Users::load_or_create(dir.path()).unwrap();
        assert!(users.is_empty());
        let secret = users.secret().clone();
        assert_eq!(Users::load(dir.path()).unwrap().unwrap().secret(), &secret);
        let alice = credential(Mechanism::ScramSha256, "a-pass");
        users.create("alice", alice.clone()).unwrap();
        users
            .create("alice", credential(Mechanism::ScramSha512, "a-pass"))
            .unwrap();
        users
            .create("bob", credential(Mechanism::ScramSha512, "b-pass"))
            .unwrap();
        users.save(dir.path()).unwrap();
        let loaded = Users::load(dir.path()).unwrap().unwrap();
        assert_eq!(loaded.secret(), &secret);
        assert_eq!(
            loaded.credential("alice", Mechanism::ScramSha256),
            Some(&alice)
        );
        assert!(loaded.credential("bob", Mechanism::ScramSha256).is_none());
        let listed: Vec<_> = loaded.list().collect();
        assert_eq!(
            listed,
            [
                ("alice", Mechanism::ALL.to_vec()),
                ("bob", vec![Mechanism::ScramSha512])
            ]
        );
        let text = std::fs::read_to_string(security_dir(dir.path()).join(USERS_FILE)).unwrap();
        assert!(!text.contains("a-pass") && !text.contains("b-pass"));
    }

    #[test]
    fn changes_are_checked() {
        let mut users = Users::new().unwrap();
        let c = credential(Mechanism::ScramSha256, "p");
        users.create("alice", c.clone()).unwrap();
        assert!(matches!(
            users.create("alice", c.clone()),
            Err(UsersError::Exists { .. })
        ));
        users.set("alice", c.clone()).unwrap();
        assert!(matches!(
            users.create("a b", c.clone()),
            Err(UsersError::BadName(_))
        ));
        let long = "x".repeat(256);
        assert!(matches!(
            users.create(&long, c.clone()),
            Err(UsersError::BadName(_))
        ));
        users.delete("alice").unwrap();
        assert!(matches!(
            users.delete("alice"),
            Err(UsersError::NoSuchUser { .. })
        ));
        for i in 0..USERS_MAX {
            users.users.entry(format!("u{i}")).or_default();
        }
        assert!(matches!(
            users.create("one-more", c),
            Err(UsersError::TooMany)
        ));
    }

    #[test]
    fn a_damaged_users_file_is_refused_with_its_path_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let mut users = Users::new().unwrap();
        users
            .create("alice", credential(Mechanism::ScramSha256, "p"))
            .unwrap();
        users.save(dir.path()).unwrap();
        let path = security_dir(dir.path()).join(USERS_FILE);
        let good = std::fs::read_to_string(&path).unwrap();
        let flipped = good.replacen("user alice", "user alicf", 1);
        std::fs::write(&path, &flipped).unwrap();
        let error = Users::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(error.contains("computed"), "{error}");
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        let error = Users::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("cut short"), "{error}");
        // A body that checks out but makes no sense is refused too, naming the line.
        let bodies = [
            (
                "format 1\nuser alice SCRAM-SHA-1 4096 c2FsdA== AA== AA==\n",
                "line 2: unknown mechanism",
            ),
            ("format 2\n", "format 2"),
            ("format 1\n", "no secret"),
            ("format 1\nsecret AAAA\n", "a secret of 3 bytes"),
            (
                "format 1\nuser alice SCRAM-SHA-256 1 c2FsdA== AA== AA==\n",
                "1 iterations",
            ),
            ("format 1\nwhat\n", "unexpected line"),
        ];
        for (body, reason) in bodies {
            std::fs::write(&path, store::with_checksum(body)).unwrap();
            let error = Users::load(dir.path()).unwrap_err().to_string();
            assert!(error.contains(reason), "{body}: {error}");
            assert!(error.contains(&path.display().to_string()), "{error}");
        }
    }
}
