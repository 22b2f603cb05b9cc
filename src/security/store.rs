//! The files under `<data-dir>/security/` (users, ACLs): text, one record a line, ending in
//! a `crc32c` line over everything before it, so a torn or damaged file is refused at load
//! with its path and the reason instead of being read as fewer users or fewer ACLs. Each is
//! replaced whole and durably (temp file, fsync, rename, directory fsync) through
//! [`crate::storage::fs`].

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::storage::fs::{create_dir_durable, write_file_durable};

/// The directory under the data directory that holds the security files.
pub const SECURITY_DIR: &str = "security";

/// `<data-dir>/security`.
pub fn security_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(SECURITY_DIR)
}

/// Why a security file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot use {path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("{path} is {len} bytes, over the limit of {max}; it is not a file pagurus wrote")]
    TooLarge { path: PathBuf, len: u64, max: u64 },
    #[error(
        "{path} is damaged ({reason}); restore it from a backup, or remove it to start without it"
    )]
    Corrupt { path: PathBuf, reason: String },
}

impl StoreError {
    pub(crate) fn corrupt(path: &Path, reason: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// The checked body of `dir/name` (everything before its `crc32c` line), or `None` when the
/// file does not exist. A file over `max_bytes` is refused before it is read.
pub(crate) fn read_checked(
    dir: &Path,
    name: &str,
    max_bytes: u64,
) -> Result<Option<String>, StoreError> {
    let path = dir.join(name);
    let io = |e: std::io::Error| StoreError::Io {
        path: path.clone(),
        reason: e.to_string(),
    };
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let len = file.metadata().map_err(io)?.len();
    if len > max_bytes {
        return Err(StoreError::TooLarge {
            path,
            len,
            max: max_bytes,
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let text = String::from_utf8(bytes).map_err(|_| StoreError::corrupt(&path, "not UTF-8"))?;
    body_of(&text)
        .map(|body| Some(body.to_string()))
        .map_err(|reason| StoreError::corrupt(&path, reason))
}

/// Replaces `<data-dir>/security/name` with `body` and its `crc32c` line, durably; makes
/// the directory first (durably) if it is missing.
pub(crate) fn write_checked(data_dir: &Path, name: &str, body: &str) -> Result<(), StoreError> {
    let dir = security_dir(data_dir);
    let io = |path: &Path, reason: String| StoreError::Io {
        path: path.to_path_buf(),
        reason,
    };
    create_dir_durable(&dir).map_err(|e| io(&dir, e.to_string()))?;
    // Only the broker's user may read credentials: StoredKey allows a dictionary attack on
    // the password, ServerKey lets its holder pose as the server.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io(&dir, e.to_string()))?;
    let text = with_checksum(body);
    write_file_durable(&dir, name, text.as_bytes()).map_err(|e| io(&dir.join(name), e.to_string()))
}

/// `body` (which ends in a newline, or is empty) followed by its `crc32c` line.
pub(crate) fn with_checksum(body: &str) -> String {
    debug_assert!(body.is_empty() || body.ends_with('\n'));
    format!("{body}crc32c {:08x}\n", crc32c::crc32c(body.as_bytes()))
}

/// The body of a checked text: what comes before its last line, which must be the
/// `crc32c` of it.
fn body_of(text: &str) -> Result<&str, String> {
    let Some(without_newline) = text.strip_suffix('\n') else {
        return Err("it does not end in a newline: it was cut short".to_string());
    };
    let start = without_newline.rfind('\n').map_or(0, |i| i + 1);
    let (body, last) = text.split_at(start);
    let Some(written) = last.trim_end().strip_prefix("crc32c ") else {
        return Err("its last line is not its crc32c: it was cut short".to_string());
    };
    let computed = crc32c::crc32c(body.as_bytes());
    match u32::from_str_radix(written, 16) {
        Ok(written) if written == computed => Ok(body),
        Ok(written) => Err(format!(
            "crc32c {written:08x} written, {computed:08x} computed"
        )),
        Err(_) => Err(format!("crc32c {written:?} is not hexadecimal")),
    }
}

/// `field` with '%', whitespace and control bytes as `%XX`, so it is one space-free token.
pub(crate) fn escape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    for c in field.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`escape`].
pub(crate) fn unescape(field: &str) -> Result<String, String> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = field
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in {field:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{field:?} unescapes to bytes that are not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips() {
        for field in ["plain", "with space", "50%", "tab\there", "ünï\u{0}x", ""] {
            let escaped = escape(field);
            assert!(
                !escaped.contains(' ') && !escaped.contains('\t'),
                "{escaped}"
            );
            assert_eq!(unescape(&escaped).unwrap(), field);
        }
        assert!(unescape("%zz").is_err());
        assert!(unescape("%4").is_err());
        assert!(unescape("%ff").is_err());
    }

    #[test]
    fn a_checked_file_round_trips_and_damage_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        assert!(
            read_checked(&security_dir(data), "f", 1024)
                .unwrap()
                .is_none()
        );
        write_checked(data, "f", "a 1\nb 2\n").unwrap();
        let sec = security_dir(data);
        assert_eq!(
            read_checked(&sec, "f", 1024).unwrap().unwrap(),
            "a 1\nb 2\n"
        );
        assert!(!sec.join("f.tmp").exists());
        let mode = std::fs::metadata(&sec).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        write_checked(data, "f", "").unwrap();
        assert_eq!(read_checked(&sec, "f", 1024).unwrap().unwrap(), "");
        let whole = with_checksum("a 1\nb 2\n");
        for (damaged, reason) in [
            (whole.replace("b 2", "b 3"), "computed"),
            (whole[..whole.len() - 1].to_string(), "cut short"),
            ("a 1\nb 2\n".to_string(), "cut short"),
            (whole.replace("crc32c ", "crc32c x"), "not hexadecimal"),
        ] {
            std::fs::write(sec.join("f"), damaged).unwrap();
            let error = read_checked(&sec, "f", 1024).unwrap_err().to_string();
            assert!(error.contains(reason), "{error}");
            assert!(
                error.contains(&sec.join("f").display().to_string()),
                "{error}"
            );
        }
        std::fs::write(sec.join("f"), vec![b'a'; 2000]).unwrap();
        assert!(matches!(
            read_checked(&sec, "f", 1024),
            Err(StoreError::TooLarge { len: 2000, .. })
        ));
    }
}
