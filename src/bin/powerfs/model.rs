//! What is durable and what is not: the bookkeeping behind powerfs.
//!
//! The live tree is the backing directory itself, served as is. Beside it the model keeps
//! what a power cut would leave:
//!
//! - **File data**: per file, the length covered by its last fsync/fdatasync
//!   (`durable_len`), and for every 4 KiB page inside that length that was changed since
//!   then, the page's durable bytes (`undo`, saved just before the first change). Pages
//!   changed since the last sync are `dirty` (also those past `durable_len`).
//! - **Directory entries**: the durable tree (`durable`: directory inode -> name -> inode)
//!   and the entry changes not yet durable (`pending`, in order). A rename is two changes:
//!   the entry leaves the old directory and arrives in the new one. In strict mode a change
//!   becomes durable when its directory is fsynced; in journal mode at any fsync of
//!   anything (as ext4's journal commits every earlier metadata change).
//! - **Unlinked files** are moved to a graveyard beside the backing directory rather than
//!   deleted, because a power cut may bring their entry back.
//!
//! A power cut (`power_cut`) rebuilds the backing directory from the durable tree: each
//! reachable file is moved into place and its dirty pages are put back to their durable
//! bytes and its length to `durable_len` (or, torn, a seeded random subset of the dirty
//! pages keeps the new bytes and the length is either of the two).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::libc;

pub const PAGE: u64 = 4096;
pub const ROOT: u64 = 1;
/// The parent of a node that has no live entry (unlinked file, removed directory).
pub const GRAVE: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A directory entry change is durable once its directory is fsynced (POSIX).
    Strict,
    /// Any fsync makes every earlier directory entry change durable (ext4's journal).
    Journal,
}

#[derive(Debug, Default)]
pub struct FileState {
    pub durable_len: u64,
    /// Page number -> the durable bytes of that page (at most `PAGE`, fewer at the end).
    undo: BTreeMap<u64, Vec<u8>>,
    dirty: BTreeSet<u64>,
}

#[derive(Debug)]
pub enum Kind {
    Dir,
    File(FileState),
}

#[derive(Debug)]
pub struct Node {
    pub parent: u64,
    pub name: OsString,
    pub kind: Kind,
}

#[derive(Debug)]
enum Change {
    Add(u64),
    Remove,
}

#[derive(Debug)]
struct Pending {
    dir: u64,
    name: OsString,
    change: Change,
}

/// What a power cut threw away, printed by powerfs as one line.
#[derive(Debug, Default)]
pub struct CutReport {
    pub entry_changes_dropped: usize,
    pub files_kept: usize,
    pub files_cut: usize,
    pub pages_restored: usize,
    pub pages_torn_kept: usize,
}

/// xorshift64*: the torn mode's seeded choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn coin(&mut self) -> bool {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 63 == 1
    }
}

pub struct Model {
    pub mode: Mode,
    backing: PathBuf,
    grave: PathBuf,
    nodes: HashMap<u64, Node>,
    /// Live tree: directory inode -> name -> inode.
    live: HashMap<u64, BTreeMap<OsString, u64>>,
    durable: HashMap<u64, BTreeMap<OsString, u64>>,
    pending: Vec<Pending>,
    next_ino: u64,
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

impl Model {
    /// Everything in `backing` is durable at mount time.
    pub fn scan(backing: &Path, mode: Mode) -> io::Result<Model> {
        let grave = sibling(backing, ".grave");
        if grave.exists() {
            fs::remove_dir_all(&grave)?;
        }
        fs::create_dir(&grave)?;
        let mut model = Model {
            mode,
            backing: backing.to_path_buf(),
            grave,
            nodes: HashMap::new(),
            live: HashMap::new(),
            durable: HashMap::new(),
            pending: Vec::new(),
            next_ino: ROOT + 1,
        };
        model.nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: OsString::new(),
                kind: Kind::Dir,
            },
        );
        model.live.insert(ROOT, BTreeMap::new());
        model.scan_dir(ROOT, backing)?;
        model.durable = model.live.clone();
        Ok(model)
    }

    fn scan_dir(&mut self, dir: u64, path: &Path) -> io::Result<()> {
        for entry in fs::read_dir(path)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            let kind = if meta.is_dir() {
                Kind::Dir
            } else if meta.is_file() {
                Kind::File(FileState {
                    durable_len: meta.len(),
                    ..Default::default()
                })
            } else {
                continue;
            };
            let ino = self.add_node(dir, &entry.file_name(), kind);
            if meta.is_dir() {
                self.scan_dir(ino, &entry.path())?;
            }
        }
        Ok(())
    }

    fn add_node(&mut self, parent: u64, name: &OsStr, kind: Kind) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        if matches!(kind, Kind::Dir) {
            self.live.insert(ino, BTreeMap::new());
            self.durable.insert(ino, BTreeMap::new());
        }
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_os_string(),
                kind,
            },
        );
        self.live
            .get_mut(&parent)
            .expect("parent is a live directory")
            .insert(name.to_os_string(), ino);
        ino
    }

    pub fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn child(&self, dir: u64, name: &OsStr) -> Option<u64> {
        self.live.get(&dir)?.get(name).copied()
    }

    pub fn children(&self, dir: u64) -> Option<&BTreeMap<OsString, u64>> {
        self.live.get(&dir)
    }

    /// Where the node's bytes are in the backing file system now.
    pub fn path(&self, ino: u64) -> Option<PathBuf> {
        let mut names = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let node = self.nodes.get(&at)?;
            if node.parent == GRAVE {
                return Some(self.grave.join(at.to_string()));
            }
            names.push(node.name.clone());
            at = node.parent;
        }
        let mut path = self.backing.clone();
        path.extend(names.iter().rev());
        Some(path)
    }

    pub fn child_path(&self, dir: u64, name: &OsStr) -> Option<PathBuf> {
        Some(self.path(dir)?.join(name))
    }

    fn record(&mut self, dir: u64, name: &OsStr, change: Change) {
        self.pending.push(Pending {
            dir,
            name: name.to_os_string(),
            change,
        });
    }

    /// A new file or directory entry (already made in the backing directory).
    pub fn created(&mut self, parent: u64, name: &OsStr, dir: bool) -> u64 {
        let kind = if dir {
            Kind::Dir
        } else {
            Kind::File(FileState::default())
        };
        let ino = self.add_node(parent, name, kind);
        self.record(parent, name, Change::Add(ino));
        ino
    }

    /// Removes the live entry `parent/name`. A file is moved to the graveyard (its entry
    /// may come back at a power cut); a directory must be empty and is removed.
    pub fn remove(&mut self, parent: u64, name: &OsStr) -> io::Result<u64> {
        let ino = self
            .child(parent, name)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        let path = self.path(ino).expect("live node has a path");
        match self.nodes[&ino].kind {
            Kind::Dir => fs::remove_dir(&path)?,
            Kind::File(_) => fs::rename(&path, self.grave.join(ino.to_string()))?,
        }
        self.live.get_mut(&parent).unwrap().remove(name);
        self.nodes.get_mut(&ino).unwrap().parent = GRAVE;
        self.record(parent, name, Change::Remove);
        Ok(ino)
    }

    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
    ) -> io::Result<()> {
        let ino = self
            .child(parent, name)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        let from = self.path(ino).unwrap();
        let to = self
            .child_path(new_parent, new_name)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        if let Some(target) = self.child(new_parent, new_name) {
            if target == ino {
                return Ok(());
            }
            let target_is_dir = matches!(self.nodes[&target].kind, Kind::Dir);
            let source_is_dir = matches!(self.nodes[&ino].kind, Kind::Dir);
            if target_is_dir != source_is_dir {
                let errno = if target_is_dir {
                    libc::EISDIR
                } else {
                    libc::ENOTDIR
                };
                return Err(io::Error::from_raw_os_error(errno));
            }
            // The replaced node leaves the live tree; its durable entry is replaced when the
            // rename's arrival becomes durable, so no separate Remove is recorded.
            let target_path = self.path(target).unwrap();
            if target_is_dir {
                fs::remove_dir(&target_path)?;
            } else {
                fs::rename(&target_path, self.grave.join(target.to_string()))?;
            }
            self.live.get_mut(&new_parent).unwrap().remove(new_name);
            self.nodes.get_mut(&target).unwrap().parent = GRAVE;
        }
        fs::rename(&from, &to)?;
        self.live.get_mut(&parent).unwrap().remove(name);
        self.live
            .get_mut(&new_parent)
            .unwrap()
            .insert(new_name.to_os_string(), ino);
        let node = self.nodes.get_mut(&ino).unwrap();
        node.parent = new_parent;
        node.name = new_name.to_os_string();
        self.record(parent, name, Change::Remove);
        self.record(new_parent, new_name, Change::Add(ino));
        Ok(())
    }

    fn file_mut(&mut self, ino: u64) -> Option<&mut FileState> {
        match &mut self.nodes.get_mut(&ino)?.kind {
            Kind::File(state) => Some(state),
            Kind::Dir => None,
        }
    }

    /// Before bytes `start..end` of `file` change: saves the durable bytes of every page
    /// in the range that still holds them, and marks the pages dirty.
    pub fn before_change(&mut self, ino: u64, file: &File, start: u64, end: u64) -> io::Result<()> {
        let Some(state) = self.file_mut(ino) else {
            return Ok(());
        };
        if end <= start {
            return Ok(());
        }
        for page in start / PAGE..end.div_ceil(PAGE) {
            state.dirty.insert(page);
            let at = page * PAGE;
            if at >= state.durable_len || state.undo.contains_key(&page) {
                continue;
            }
            let len = PAGE.min(state.durable_len - at) as usize;
            let mut bytes = vec![0u8; len];
            let mut done = 0;
            while done < len {
                match file.read_at(&mut bytes[done..], at + done as u64)? {
                    0 => break, // past the end: the rest reads as zeros
                    n => done += n,
                }
            }
            state.undo.insert(page, bytes);
        }
        Ok(())
    }

    /// A truncate or extend of `file` from `old_len` to `new_len`.
    pub fn before_set_len(
        &mut self,
        ino: u64,
        file: &File,
        old_len: u64,
        new_len: u64,
    ) -> io::Result<()> {
        if new_len < old_len {
            self.before_change(ino, file, new_len, old_len)
        } else {
            self.before_change(ino, file, old_len, new_len)
        }
    }

    /// fsync or fdatasync of a file: its data and length are durable; in journal mode every
    /// pending entry change too.
    pub fn sync_file(&mut self, ino: u64, len: u64) {
        if let Some(state) = self.file_mut(ino) {
            state.durable_len = len;
            state.undo.clear();
            state.dirty.clear();
        }
        if self.mode == Mode::Journal {
            self.commit(|_| true);
        }
    }

    /// fsync of a directory.
    pub fn sync_dir(&mut self, dir: u64) {
        match self.mode {
            Mode::Strict => self.commit(|p| p.dir == dir),
            Mode::Journal => self.commit(|_| true),
        }
    }

    fn commit(&mut self, covered: impl Fn(&Pending) -> bool) {
        let (now, later): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(covered);
        self.pending = later;
        for change in now {
            let entries = self.durable.entry(change.dir).or_default();
            match change.change {
                Change::Add(ino) => entries.insert(change.name, ino),
                Change::Remove => entries.remove(&change.name),
            };
        }
    }

    /// The power cut: rebuilds the backing directory from the durable image. Called with
    /// the file system unmounted; the model must not be used afterwards.
    pub fn power_cut(&mut self, mut torn: Option<Rng>) -> io::Result<CutReport> {
        let mut report = CutReport {
            entry_changes_dropped: self.pending.len(),
            ..Default::default()
        };
        let staging = sibling(&self.backing, ".rebuild");
        if staging.exists() {
            fs::remove_dir_all(&staging)?;
        }
        fs::create_dir(&staging)?;
        let mut placed: HashMap<u64, PathBuf> = HashMap::new();
        let mut stack = vec![(ROOT, staging.clone())];
        // A directory reachable twice (only one half of a rename durable) is walked once per
        // path; the count bounds a cycle such halves could form.
        let mut walked = 0usize;
        while let Some((dir, at)) = stack.pop() {
            walked += 1;
            assert!(walked < 10_000_000, "durable tree has a cycle");
            let entries = self.durable.get(&dir).cloned().unwrap_or_default();
            for (name, ino) in entries {
                let target = at.join(&name);
                match &self.nodes[&ino].kind {
                    Kind::Dir => {
                        fs::create_dir(&target)?;
                        stack.push((ino, target));
                    }
                    Kind::File(_) => {
                        if let Some(first) = placed.get(&ino) {
                            fs::copy(first, &target)?;
                            continue;
                        }
                        let source = self.path(ino).unwrap();
                        fs::rename(&source, &target)?;
                        self.restore(ino, &target, torn.as_mut(), &mut report)?;
                        placed.insert(ino, target);
                    }
                }
            }
        }
        // Swap the rebuilt tree in: the backing directory itself stays (it may be a mount
        // point or be named by the caller), its contents are replaced.
        for entry in fs::read_dir(&self.backing)? {
            let path = entry?.path();
            if path.is_dir() {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
        }
        for entry in fs::read_dir(&staging)? {
            let entry = entry?;
            fs::rename(entry.path(), self.backing.join(entry.file_name()))?;
        }
        fs::remove_dir(&staging)?;
        fs::remove_dir_all(&self.grave)?;
        Ok(report)
    }

    /// Puts a file back to what its last sync made durable (or, torn, to a mix).
    fn restore(
        &mut self,
        ino: u64,
        path: &Path,
        torn: Option<&mut Rng>,
        report: &mut CutReport,
    ) -> io::Result<()> {
        let Some(state) = self.file_mut(ino) else {
            return Ok(());
        };
        let file = fs::OpenOptions::new().write(true).open(path)?;
        let len_now = file.metadata()?.len();
        if state.dirty.is_empty() && len_now == state.durable_len {
            report.files_kept += 1;
            return Ok(());
        }
        report.files_cut += 1;
        let Some(rng) = torn else {
            for (&page, bytes) in &state.undo {
                file.write_all_at(bytes, page * PAGE)?;
                report.pages_restored += 1;
            }
            return file.set_len(state.durable_len);
        };
        let new_len = if rng.coin() {
            len_now
        } else {
            state.durable_len
        };
        file.set_len(new_len)?;
        for &page in &state.dirty {
            let at = page * PAGE;
            if at >= new_len {
                break;
            }
            if rng.coin() {
                report.pages_torn_kept += 1;
                continue;
            }
            let mut bytes = vec![0u8; PAGE.min(new_len - at) as usize];
            if let Some(old) = state.undo.get(&page) {
                let n = old.len().min(bytes.len());
                bytes[..n].copy_from_slice(&old[..n]);
            }
            file.write_all_at(&bytes, at)?;
            report.pages_restored += 1;
        }
        Ok(())
    }
}
