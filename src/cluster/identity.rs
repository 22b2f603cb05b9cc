//! The cluster id every node of a cluster shares, agreed on without a round of messages:
//! at a node's first start it is derived from the initial peer list (every member's id,
//! host and port, sorted by id) with SHA-256, and kept in `<data-dir>/cluster/cluster_id`.
//! Every start after that uses the kept id, so a peer whose address later changes in
//! `--cluster-peers` does not split the cluster. Nodes formed with the same `--cluster-peers`
//! agree; a node given another list (another member, host or port) gets another id and
//! its hellos are refused, which shows a wrong list at once instead of as a cluster that
//! never elects.
//!
//! A node added to a running cluster (`pagurus cluster add-node`) is started with
//! `--cluster-join ID`, the id `add-node` printed: it keeps that id instead of deriving
//! one from its own `--cluster-peers` (which name it, so they would give another id).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::cluster::ClusterId;
use crate::cluster::config::Peer;
use crate::storage::fs::{create_dir_durable, write_file_durable};

/// The file under `<data-dir>/cluster/`.
pub const CLUSTER_ID_FILE: &str = "cluster_id";
const MAGIC: &[u8; 4] = b"PGCI";
const VERSION: u8 = 1;
/// magic, version, id, CRC32C.
const FILE_LEN: usize = 4 + 1 + 16 + 4;

#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    #[error("cannot keep the cluster id in {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{path} is damaged ({what}); restore it or remove the node's cluster/ directory")]
    Damaged { path: String, what: &'static str },
    #[error(
        "--cluster-join {given}: this data directory belongs to cluster {kept}; give the joining node an empty data directory"
    )]
    JoinMismatch { kept: ClusterId, given: ClusterId },
}

/// `<data-dir>/cluster/`: the controller's files and the cluster id.
pub fn cluster_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cluster")
}

/// The id a cluster formed with `peers` gets.
pub fn derive(peers: &[Peer]) -> ClusterId {
    let mut sorted: Vec<&Peer> = peers.iter().collect();
    sorted.sort_by_key(|p| p.node);
    let mut hash = Sha256::new();
    hash.update(b"pagurus cluster id v1\0");
    for peer in sorted {
        hash.update(peer.node.0.to_be_bytes());
        let host = peer.addr.host.as_bytes();
        hash.update((host.len() as u64).to_be_bytes());
        hash.update(host);
        hash.update(peer.addr.port.to_be_bytes());
    }
    let digest = hash.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    ClusterId(id)
}

/// The kept id, or (first start) `join` or else the one `peers` derive, made durable
/// before it is used. The second value says whether it was just made. A kept id other
/// than `join` is refused.
pub fn load_or_create(
    data_dir: &Path,
    peers: &[Peer],
    join: Option<ClusterId>,
) -> Result<(ClusterId, bool), ClusterIdError> {
    let dir = cluster_dir(data_dir);
    let path = dir.join(CLUSTER_ID_FILE);
    let shown = path.display().to_string();
    let io = |e: &dyn std::fmt::Display| ClusterIdError::Io {
        path: shown.clone(),
        reason: e.to_string(),
    };
    match std::fs::metadata(&path) {
        Ok(meta) if meta.len() != FILE_LEN as u64 => {
            return Err(ClusterIdError::Damaged {
                path: shown,
                what: "wrong length",
            });
        }
        Ok(_) => {
            let bytes = std::fs::read(&path).map_err(|e| io(&e))?;
            let kept =
                decode(&bytes).map_err(|what| ClusterIdError::Damaged { path: shown, what })?;
            return match join {
                Some(given) if given != kept => Err(ClusterIdError::JoinMismatch { kept, given }),
                _ => Ok((kept, false)),
            };
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&e)),
    }
    let id = join.unwrap_or_else(|| derive(peers));
    create_dir_durable(&dir).map_err(|e| io(&e))?;
    write_file_durable(&dir, CLUSTER_ID_FILE, &encode(id)).map_err(|e| io(&e))?;
    Ok((id, true))
}

fn encode(id: ClusterId) -> Vec<u8> {
    let mut out = Vec::with_capacity(FILE_LEN);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&id.0);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn decode(bytes: &[u8]) -> Result<ClusterId, &'static str> {
    if bytes.len() != FILE_LEN {
        return Err("wrong length");
    }
    let (body, crc) = bytes.split_at(FILE_LEN - 4);
    if crc32c::crc32c(body).to_be_bytes() != crc {
        return Err("CRC mismatch");
    }
    if &body[..4] != MAGIC {
        return Err("bad magic");
    }
    if body[4] != VERSION {
        return Err("unknown version");
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&body[5..]);
    Ok(ClusterId(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::config::parse_peers;

    #[test]
    fn the_same_peers_in_any_order_give_the_same_id_and_another_list_another() {
        let a = parse_peers("1=h1:9000,2=h2:9000,3=h3:9000").unwrap();
        let b = parse_peers("3=h3:9000,1=h1:9000,2=h2:9000").unwrap();
        let c = parse_peers("1=h1:9000,2=h2:9000,3=h3:9001").unwrap();
        assert_eq!(derive(&a), derive(&b));
        assert_ne!(derive(&a), derive(&c));
    }

    #[test]
    fn the_first_id_is_kept_across_starts_even_when_the_list_changes() {
        let dir = tempfile::tempdir().unwrap();
        let first = parse_peers("1=h1:9000,2=h2:9000").unwrap();
        let moved = parse_peers("1=h1:9000,2=elsewhere:9000").unwrap();
        let (id, made) = load_or_create(dir.path(), &first, None).unwrap();
        assert!(made);
        assert_eq!(id, derive(&first));
        let (again, made) = load_or_create(dir.path(), &moved, None).unwrap();
        assert!(!made);
        assert_eq!(again, id);
    }

    #[test]
    fn a_damaged_id_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let peers = parse_peers("1=h1:9000,2=h2:9000").unwrap();
        load_or_create(dir.path(), &peers, None).unwrap();
        let path = cluster_dir(dir.path()).join(CLUSTER_ID_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[7] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = load_or_create(dir.path(), &peers, None).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
    }

    #[test]
    fn a_joining_node_keeps_the_id_it_joins_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        let peers = parse_peers("1=h1:9000,2=h2:9000,4=h4:9000").unwrap();
        let running = derive(&parse_peers("1=h1:9000,2=h2:9000").unwrap());
        let (id, made) = load_or_create(dir.path(), &peers, Some(running)).unwrap();
        assert!(made);
        assert_eq!(id, running, "not the id its own flags derive");
        let (again, _) = load_or_create(dir.path(), &peers, None).unwrap();
        assert_eq!(again, running, "kept for the starts without --cluster-join");
        let other = derive(&peers);
        let err = load_or_create(dir.path(), &peers, Some(other)).unwrap_err();
        assert!(
            matches!(err, ClusterIdError::JoinMismatch { kept, given } if kept == running && given == other),
            "{err}"
        );
        assert!(err.to_string().contains("empty data directory"), "{err}");
    }
}
