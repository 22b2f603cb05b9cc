//! The data directory's marker (`<data-dir>/pagurus.meta`): written at the first start, it
//! says the directory is pagurus's and in which on-disk format. The broker starts on an
//! empty directory (and marks it) or on one with a marker it can read; anything else is
//! refused, so `serve --data-dir` on a directory of someone else's files never starts
//! (and never empties its `trash/`).
//!
//! A directory written by a pagurus from before the marker (no marker, only pagurus's own
//! entries at the top: `topics/`, `offsets/`, `trash/`, `security/`, `cluster/`, `.lock`) is adopted:
//! marked, and logged.

use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use crate::storage::fs::write_file_durable;

/// The marker's file name in the data directory.
pub const MARKER_FILE: &str = "pagurus.meta";
/// The on-disk format this broker writes and reads (segments, index, topic.meta, offsets).
///
/// - 1: the first.
/// - 2: the active segment's `.wal` may end in an index journal (`storage::index_journal`)
///   holding the only durable copy of recent index entries. A broker that reads format 1
///   would cut those acknowledged batches after a crash, so it must refuse the directory.
///   Format 1 directories are read as they are and marked 2 at start.
pub const FORMAT_VERSION: u32 = 2;
/// Largest marker file read (it is a few lines).
const MARKER_BYTES_MAX: u64 = 4096;

/// Entries pagurus itself makes at the top of a data directory.
const OWN_ENTRIES: &[&str] = &[".lock", "topics", "offsets", "trash", "security", "cluster"];
/// Entries that do not make a directory someone else's: the marker's temp file, which a
/// crash during the first start can leave, and `lost+found`, which a freshly made ext4 file
/// system has at its root.
const IGNORED_ENTRIES: &[&str] = &["pagurus.meta.tmp", "lost+found"];

/// Largest node id `--node-id` takes: a Kafka broker id is `node << 16 | core`
/// (docs/CLUSTER.md) and must be a positive i32 (the placement's `NodeId::MAX`).
pub const NODE_ID_MAX: u32 = 0x7fff;

/// Why a data directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error(
        "{dir} is not a pagurus data directory: it holds {entry:?} and no {MARKER_FILE}; use an empty directory or one pagurus made"
    )]
    Foreign { dir: String, entry: String },
    #[error(
        "{dir} has data format {found}, newer than this pagurus reads ({FORMAT_VERSION}); run a newer pagurus"
    )]
    Newer { dir: String, found: u32 },
    #[error(
        "{path} cannot be read as a pagurus marker: {why}; if this is a pagurus data directory, restore the file"
    )]
    BadMarker { path: String, why: String },
    #[error("cannot check the data directory {dir}: {why}")]
    Io { dir: String, why: String },
    #[error(
        "{dir} belongs to node {found} of a cluster, not to node {given}; start it with --node-id {found}, or give node {given} its own data directory"
    )]
    OtherNode { dir: String, found: u32, given: u32 },
    #[error(
        "{dir} belongs to node {found} of a cluster; start it with --node-id {found} and that node's cluster flags"
    )]
    ClusterNode { dir: String, found: u32 },
}

/// Which node a data directory belongs to, as found at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeIdentity {
    /// No node id given and none kept: a one-node broker, as before clusters.
    Single,
    /// The node id given is the one the marker keeps.
    Known(u32),
    /// The marker kept none (a new directory, or a one-node broker's joining a cluster):
    /// the node id given is kept from now on.
    Recorded(u32),
}

/// What was found at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// It had a marker this broker reads.
    Known { format: u32, created_ns: u64 },
    /// It had a marker of an older format, which this broker reads; it was marked with
    /// [`FORMAT_VERSION`] now, before anything in the newer format was written.
    Upgraded { from: u32, created_ns: u64 },
    /// It was empty; the marker was written now.
    New,
    /// It held only pagurus's own layout and no marker (written before markers); marked now.
    Adopted,
}

impl Marked {
    /// Says what start-up found in the data directory.
    pub fn log(self, data_dir: &Path) {
        let data_dir = data_dir.display();
        match self {
            Marked::New => info!(%data_dir, "new data directory; {MARKER_FILE} written"),
            Marked::Adopted => {
                warn!(%data_dir, "data directory from before {MARKER_FILE} (only pagurus's own entries); adopted and marked")
            }
            Marked::Known { format, created_ns } => {
                info!(%data_dir, format, created_ns, "data directory")
            }
            Marked::Upgraded { from, created_ns } => {
                warn!(%data_dir, from, to = FORMAT_VERSION, created_ns,
                    "data directory of an older format: read as it is, marked with this one (older brokers now refuse it)")
            }
        }
    }
}

impl NodeIdentity {
    /// Says which node the data directory belongs to, when it is a cluster node's.
    pub fn log(self, data_dir: &Path) {
        let data_dir = data_dir.display();
        match self {
            NodeIdentity::Single => {}
            NodeIdentity::Known(node_id) => {
                info!(%data_dir, node_id, "data directory of this node")
            }
            NodeIdentity::Recorded(node_id) => {
                info!(%data_dir, node_id, "data directory now belongs to this node; {MARKER_FILE} keeps its id")
            }
        }
    }
}

/// Checks the data directory `dir` (which exists) and marks it if it is new or adopted.
pub fn check_and_mark(dir: &Path) -> Result<Marked, DataDirError> {
    let shown = dir.display().to_string();
    let io = |why: String| DataDirError::Io {
        dir: shown.clone(),
        why,
    };
    let marker = dir.join(MARKER_FILE);
    match fs::symlink_metadata(&marker) {
        Ok(_) => return read_marker(dir, &marker),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e.to_string())),
    }
    let mut own = false;
    for entry in fs::read_dir(dir).map_err(|e| io(e.to_string()))? {
        let entry = entry.map_err(|e| io(e.to_string()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if IGNORED_ENTRIES.contains(&name.as_str()) {
            continue;
        }
        let is_dir = entry.file_type().map_err(|e| io(e.to_string()))?.is_dir();
        let ours = match name.as_str() {
            "topics" | "offsets" | "trash" | "security" | "cluster" => is_dir,
            ".lock" => !is_dir,
            _ => false,
        };
        if !ours {
            return Err(DataDirError::Foreign {
                dir: shown,
                entry: name,
            });
        }
        own |= OWN_ENTRIES.contains(&name.as_str());
    }
    write_marker(dir, now_ns(), None).map_err(|e| io(e.to_string()))?;
    Ok(if own { Marked::Adopted } else { Marked::New })
}

/// Checks that the data directory `dir` (marked by [`check_and_mark`]) belongs to the node
/// `given` (`--node-id`), and keeps that id in its marker if it kept none. A directory of
/// one cluster node started as another node, or as a one-node broker, is refused: its
/// partitions and its Raft logs are that node's, and serving them as someone else would
/// split the cluster's history.
pub fn check_node(dir: &Path, given: Option<u32>) -> Result<NodeIdentity, DataDirError> {
    let shown = dir.display().to_string();
    let marker = dir.join(MARKER_FILE);
    let text = fs::read_to_string(&marker).map_err(|e| DataDirError::BadMarker {
        path: marker.display().to_string(),
        why: e.to_string(),
    })?;
    let fields = parse(&text).map_err(|why| DataDirError::BadMarker {
        path: marker.display().to_string(),
        why,
    })?;
    match (given, fields.node_id) {
        (None, None) => Ok(NodeIdentity::Single),
        (None, Some(found)) => Err(DataDirError::ClusterNode { dir: shown, found }),
        (Some(given), Some(found)) if given == found => Ok(NodeIdentity::Known(given)),
        (Some(given), Some(found)) => Err(DataDirError::OtherNode {
            dir: shown,
            found,
            given,
        }),
        (Some(given), None) => {
            write_marker(dir, fields.created_ns, Some(given)).map_err(|e| DataDirError::Io {
                dir: shown,
                why: e.to_string(),
            })?;
            Ok(NodeIdentity::Recorded(given))
        }
    }
}

fn read_marker(dir: &Path, marker: &Path) -> Result<Marked, DataDirError> {
    let bad = |why: String| DataDirError::BadMarker {
        path: marker.display().to_string(),
        why,
    };
    let file = fs::File::open(marker).map_err(|e| bad(e.to_string()))?;
    let len = file.metadata().map_err(|e| bad(e.to_string()))?.len();
    if len > MARKER_BYTES_MAX {
        return Err(bad(format!("{len} bytes, at most {MARKER_BYTES_MAX}")));
    }
    let text = fs::read_to_string(marker).map_err(|e| bad(e.to_string()))?;
    let Fields {
        format,
        created_ns,
        node_id,
    } = parse(&text).map_err(bad)?;
    if format > FORMAT_VERSION {
        return Err(DataDirError::Newer {
            dir: dir.display().to_string(),
            found: format,
        });
    }
    if format < FORMAT_VERSION {
        write_marker(dir, created_ns, node_id).map_err(|e| DataDirError::Io {
            dir: dir.display().to_string(),
            why: e.to_string(),
        })?;
        return Ok(Marked::Upgraded {
            from: format,
            created_ns,
        });
    }
    Ok(Marked::Known { format, created_ns })
}

/// What a marker says.
struct Fields {
    format: u32,
    created_ns: u64,
    /// The cluster node the directory belongs to; none for a one-node broker's.
    node_id: Option<u32>,
}

/// The marker's fields from its text: `key=value` lines (and `#` comments), unknown keys
/// ignored (a later version may add some), `format` and `created_ns` required, `node_id`
/// optional.
fn parse(text: &str) -> Result<Fields, String> {
    let (mut format, mut created_ns, mut node_id) = (None, None, None);
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {line:?} is not key=value"));
        };
        match key.trim() {
            "format" => {
                format = Some(
                    value
                        .trim()
                        .parse::<u32>()
                        .map_err(|e| format!("format {value:?}: {e}"))?,
                )
            }
            "created_ns" => {
                created_ns = Some(
                    value
                        .trim()
                        .parse::<u64>()
                        .map_err(|e| format!("created_ns {value:?}: {e}"))?,
                )
            }
            "node_id" => {
                let id = value
                    .trim()
                    .parse::<u32>()
                    .map_err(|e| format!("node_id {value:?}: {e}"))?;
                if !(1..=NODE_ID_MAX).contains(&id) {
                    return Err(format!("node_id {id} is not in 1..={NODE_ID_MAX}"));
                }
                node_id = Some(id);
            }
            _ => {}
        }
    }
    match (format, created_ns) {
        (Some(0), _) => Err("format 0".to_string()),
        (Some(format), Some(created_ns)) => Ok(Fields {
            format,
            created_ns,
            node_id,
        }),
        _ => Err("format= and created_ns= are required".to_string()),
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn write_marker(
    dir: &Path,
    created_ns: u64,
    node_id: Option<u32>,
) -> Result<(), crate::storage::StorageError> {
    let mut text = format!(
        "# pagurus data directory; do not edit\nformat={FORMAT_VERSION}\ncreated_ns={created_ns}\ncreated_by=pagurus {}\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(id) = node_id {
        text.push_str(&format!("node_id={id}\n"));
    }
    write_file_durable(dir, MARKER_FILE, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_marked_then_known() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_and_mark(dir.path()).unwrap(), Marked::New);
        assert!(matches!(
            check_and_mark(dir.path()).unwrap(),
            Marked::Known {
                format: FORMAT_VERSION,
                ..
            }
        ));
    }

    #[test]
    fn an_older_format_is_read_and_marked_with_this_one() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(MARKER_FILE),
            "# pagurus data directory; do not edit\nformat=1\ncreated_ns=77\n",
        )
        .unwrap();
        assert_eq!(
            check_and_mark(dir.path()).unwrap(),
            Marked::Upgraded {
                from: 1,
                created_ns: 77
            }
        );
        assert_eq!(
            check_and_mark(dir.path()).unwrap(),
            Marked::Known {
                format: FORMAT_VERSION,
                created_ns: 77
            },
            "marked once, keeping when it was made"
        );
    }

    #[test]
    fn lost_and_found_alone_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("lost+found")).unwrap();
        assert_eq!(check_and_mark(dir.path()).unwrap(), Marked::New);
    }

    #[test]
    fn own_layout_without_marker_is_adopted() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("topics/t/0")).unwrap();
        fs::create_dir(dir.path().join("offsets")).unwrap();
        fs::write(dir.path().join(".lock"), b"").unwrap();
        fs::create_dir(dir.path().join("security")).unwrap();
        fs::create_dir_all(dir.path().join("cluster/controller")).unwrap();
        assert_eq!(check_and_mark(dir.path()).unwrap(), Marked::Adopted);
        assert!(dir.path().join(MARKER_FILE).is_file());
    }

    #[test]
    fn foreign_files_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("trash/important")).unwrap();
        fs::write(dir.path().join("thesis.txt"), b"years").unwrap();
        let error = check_and_mark(dir.path()).unwrap_err();
        assert!(matches!(error, DataDirError::Foreign { ref entry, .. } if entry == "thesis.txt"));
        assert!(!dir.path().join(MARKER_FILE).exists());
        // A file where pagurus keeps a directory is not pagurus's either.
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("topics"), b"").unwrap();
        assert!(check_and_mark(dir.path()).is_err());
    }

    #[test]
    fn a_node_id_is_kept_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        check_and_mark(dir.path()).unwrap();
        assert_eq!(check_node(dir.path(), None).unwrap(), NodeIdentity::Single);
        // A one-node broker's directory joins a cluster as the node it is started as.
        assert_eq!(
            check_node(dir.path(), Some(3)).unwrap(),
            NodeIdentity::Recorded(3)
        );
        assert_eq!(
            check_node(dir.path(), Some(3)).unwrap(),
            NodeIdentity::Known(3)
        );
        assert!(matches!(
            check_node(dir.path(), Some(4)),
            Err(DataDirError::OtherNode {
                found: 3,
                given: 4,
                ..
            })
        ));
        assert!(matches!(
            check_node(dir.path(), None),
            Err(DataDirError::ClusterNode { found: 3, .. })
        ));
        // The id survives the marker's rewrite at a format upgrade, and its creation time.
        let text = fs::read_to_string(dir.path().join(MARKER_FILE)).unwrap();
        let created = parse(&text).unwrap().created_ns;
        fs::write(
            dir.path().join(MARKER_FILE),
            format!("format=1\ncreated_ns={created}\nnode_id=3\n"),
        )
        .unwrap();
        assert!(matches!(
            check_and_mark(dir.path()).unwrap(),
            Marked::Upgraded { from: 1, .. }
        ));
        assert_eq!(
            check_node(dir.path(), Some(3)).unwrap(),
            NodeIdentity::Known(3)
        );
        for bad in ["node_id=0", "node_id=x", "node_id=32768"] {
            fs::write(
                dir.path().join(MARKER_FILE),
                format!("format={FORMAT_VERSION}\ncreated_ns=1\n{bad}\n"),
            )
            .unwrap();
            assert!(
                matches!(
                    check_node(dir.path(), Some(3)),
                    Err(DataDirError::BadMarker { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn newer_or_unreadable_markers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let newer = format!("format={}\ncreated_ns=1\n", FORMAT_VERSION + 1);
        fs::write(dir.path().join(MARKER_FILE), newer).unwrap();
        assert!(matches!(
            check_and_mark(dir.path()),
            Err(DataDirError::Newer { found, .. }) if found == FORMAT_VERSION + 1
        ));
        for text in ["", "garbage", "format=x\ncreated_ns=1", "format=1"] {
            fs::write(dir.path().join(MARKER_FILE), text).unwrap();
            assert!(
                matches!(
                    check_and_mark(dir.path()),
                    Err(DataDirError::BadMarker { .. })
                ),
                "{text:?}"
            );
        }
        let unknown_key = format!("format={FORMAT_VERSION}\ncreated_ns=7\nnew_key=x\n");
        fs::write(dir.path().join(MARKER_FILE), unknown_key).unwrap();
        assert_eq!(
            check_and_mark(dir.path()).unwrap(),
            Marked::Known {
                format: FORMAT_VERSION,
                created_ns: 7
            }
        );
    }
}
