//! The ACL file, `<data-dir>/security/acls`: one binding a line, in a checked text file
//! (see [`crate::security::store`]):
//!
//! ```text
//! # ACLs of a pagurus broker; do not edit
//! format 1
//! acl <resource-type> <pattern-type> <name> <principal> <host> <operation> <permission>
//! crc32c <hex of every byte above>
//! ```
//!
//! Names and principals are %-escaped (whitespace, control characters and '%').

use std::path::Path;

use super::{
    ACLS_MAX, AclBinding, Acls, Host, Operation, PatternType, Permission, Principal,
    RESOURCE_NAME_BYTES_MAX, ResourcePattern, ResourceType,
};
use crate::security::store::{self, StoreError, escape, security_dir, unescape};

/// The ACL file's name in `<data-dir>/security/`.
pub const ACLS_FILE: &str = "acls";
/// Largest ACL file read: [`ACLS_MAX`] lines with every name byte escaped.
const ACLS_FILE_BYTES_MAX: u64 = ACLS_MAX as u64 * (6 * RESOURCE_NAME_BYTES_MAX as u64 + 128);
const FORMAT: u32 = 1;

impl Acls {
    /// Reads `<data-dir>/security/acls`; no bindings when there is no file.
    pub fn load(data_dir: &Path) -> Result<Acls, StoreError> {
        let dir = security_dir(data_dir);
        match store::read_checked(&dir, ACLS_FILE, ACLS_FILE_BYTES_MAX)? {
            None => Ok(Acls::default()),
            Some(body) => {
                parse(&body).map_err(|why| StoreError::corrupt(&dir.join(ACLS_FILE), why))
            }
        }
    }

    /// Replaces the ACL file with these bindings, durably.
    pub fn save(&self, data_dir: &Path) -> Result<(), StoreError> {
        store::write_checked(data_dir, ACLS_FILE, &self.encode())
    }

    fn encode(&self) -> String {
        let mut out = format!("# ACLs of a pagurus broker; do not edit\nformat {FORMAT}\n");
        for b in self.iter() {
            out.push_str(&format!(
                "acl {} {} {} {} {} {} {}\n",
                b.pattern.resource_type,
                b.pattern.pattern_type,
                escape(&b.pattern.name),
                escape(&b.principal.to_string()),
                b.host,
                b.operation,
                b.permission
            ));
        }
        out
    }
}

fn parse(body: &str) -> Result<Acls, String> {
    let mut format = None;
    let mut acls = Acls::default();
    for (n, line) in body.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}", n + 1);
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            [] | [""] => {}
            [first, ..] if first.starts_with('#') => {}
            ["format", v] => format = Some(v.parse::<u32>().map_err(|e| at(e.to_string()))?),
            ["acl", rest @ ..] => {
                let binding = parse_binding(rest).map_err(at)?;
                if !acls.add(binding).map_err(|e| at(e.to_string()))? {
                    return Err(at("the same ACL twice".to_string()));
                }
            }
            _ => {
                return Err(at(format!(
                    "unexpected line {:?}",
                    line.chars().take(64).collect::<String>()
                )));
            }
        }
    }
    match format {
        Some(FORMAT) => Ok(acls),
        Some(other) => Err(format!("format {other}; this pagurus reads {FORMAT}")),
        None => Err("no format line".to_string()),
    }
}

fn parse_binding(fields: &[&str]) -> Result<AclBinding, String> {
    let [
        resource_type,
        pattern_type,
        name,
        principal,
        host,
        operation,
        permission,
    ] = fields
    else {
        return Err(format!(
            "an acl line has 8 fields, not {}",
            fields.len() + 1
        ));
    };
    let named = |what: &str, text: &str| format!("unknown {what} {text:?}");
    let resource_type = ResourceType::from_name(resource_type)
        .ok_or_else(|| named("resource type", resource_type))?;
    let pattern_type =
        PatternType::from_name(pattern_type).ok_or_else(|| named("pattern type", pattern_type))?;
    let name = unescape(name)?;
    let pattern =
        ResourcePattern::new(resource_type, pattern_type, &name).map_err(|e| e.to_string())?;
    Ok(AclBinding {
        pattern,
        principal: Principal::parse(&unescape(principal)?).map_err(|e| e.to_string())?,
        host: Host::parse(host).map_err(|e| e.to_string())?,
        operation: Operation::from_name(operation).ok_or_else(|| named("operation", operation))?,
        permission: Permission::from_name(permission)
            .ok_or_else(|| named("permission", permission))?,
    })
}
