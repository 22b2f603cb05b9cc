//! The crash-consistency harness can fail: small writers on a powerfs mount, each once
//! without a directory fsync (or an fdatasync, or an msync) and once with it, then a power
//! cut. The careless writer loses its data, the careful one keeps it, in strict, journal and
//! torn modes as each applies. The files are checked in the backing directory after the cut.
//! Needs root and /dev/fuse (as CI has).

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::powerfs::{Mode, PowerFs};

fn sync_dir(path: &Path) {
    File::open(path).unwrap().sync_all().unwrap();
}

/// Creates `path` with `data`, fdatasynced if `datasync`.
fn write_file(path: &Path, data: &[u8], datasync: bool) {
    let mut file = File::create(path).unwrap();
    file.write_all(data).unwrap();
    if datasync {
        file.sync_data().unwrap();
    }
}

fn read(path: &Path) -> Option<Vec<u8>> {
    fs::read(path).ok()
}

#[test]
fn skipped_directory_fsync_loses_the_entry_in_strict_mode() {
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_in(root.path(), Mode::Strict);
    let m = fs.mount.clone();
    fs::create_dir(m.join("d")).unwrap();
    sync_dir(&m);
    write_file(&m.join("d/careless"), b"careless", true);
    write_file(&m.join("d/careful"), b"careful", true);
    sync_dir(&m.join("d"));
    write_file(&m.join("d/after"), b"after the directory fsync", true);
    // The bug of issue 12: a directory made without an fsync of its parent.
    fs::create_dir(m.join("topics")).unwrap();
    write_file(&m.join("topics/data"), b"in an undurable directory", true);
    sync_dir(&m.join("topics"));
    let report = fs.power_cut();
    eprintln!("{report}");
    let b = &fs.backing;
    assert_eq!(read(&b.join("d/careful")).as_deref(), Some(&b"careful"[..]));
    assert_eq!(
        read(&b.join("d/careless")).as_deref(),
        Some(&b"careless"[..])
    );
    assert_eq!(
        read(&b.join("d/after")),
        None,
        "entry not covered by an fsync of d"
    );
    assert!(
        !b.join("topics").exists(),
        "topics/ was never fsynced in its parent"
    );
    // The surviving tree is served again after a remount.
    fs.remount();
    assert_eq!(
        read(&fs.mount.join("d/careful")).as_deref(),
        Some(&b"careful"[..])
    );
    assert_eq!(read(&fs.mount.join("d/after")), None);
}

#[test]
fn journal_mode_commits_entries_at_any_later_fsync_only() {
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_in(root.path(), Mode::Journal);
    let m = fs.mount.clone();
    // ext4 hides the issue-12 bug: the file's fdatasync commits its directory's entry too.
    fs::create_dir(m.join("topics")).unwrap();
    write_file(&m.join("topics/data"), b"synced", true);
    // Nothing fsynced after these: lost even in journal mode.
    fs::create_dir(m.join("late")).unwrap();
    write_file(&m.join("late-file"), b"never synced", false);
    let report = fs.power_cut();
    eprintln!("{report}");
    let b = &fs.backing;
    assert_eq!(
        read(&b.join("topics/data")).as_deref(),
        Some(&b"synced"[..])
    );
    assert!(!b.join("late").exists(), "no fsync after the mkdir");
    assert_eq!(read(&b.join("late-file")), None);
}

#[test]
fn skipped_fdatasync_loses_the_data() {
    for mode in [Mode::Strict, Mode::Journal] {
        let root = tempfile::tempdir().unwrap();
        let mut fs = PowerFs::mount_in(root.path(), mode);
        let m = fs.mount.clone();
        File::create(m.join("careless")).unwrap();
        File::create(m.join("careful")).unwrap();
        sync_dir(&m);
        write_file(&m.join("careless"), b"not synced", false);
        write_file(&m.join("careful"), b"synced", true);
        // Appending after a sync: the synced prefix stays, the rest goes.
        let file = OpenOptions::new()
            .write(true)
            .open(m.join("careful"))
            .unwrap();
        file.write_all_at(b" and more", 6).unwrap();
        drop(file);
        fs.power_cut();
        let b = &fs.backing;
        assert_eq!(
            read(&b.join("careless")).as_deref(),
            Some(&b""[..]),
            "{mode:?}"
        );
        assert_eq!(
            read(&b.join("careful")).as_deref(),
            Some(&b"synced"[..]),
            "{mode:?}"
        );
    }
}

#[test]
fn rename_needs_its_directory_fsync() {
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_in(root.path(), Mode::Strict);
    let m = fs.mount.clone();
    write_file(&m.join("a.tmp"), b"a", true);
    write_file(&m.join("b.tmp"), b"b", true);
    write_file(&m.join("gone"), b"unlinked", true);
    sync_dir(&m);
    fs::rename(m.join("a.tmp"), m.join("a")).unwrap();
    fs::rename(m.join("b.tmp"), m.join("b")).unwrap();
    fs::remove_file(m.join("gone")).unwrap();
    let file = File::open(m.join("b")).unwrap();
    file.sync_all().unwrap(); // a file fsync is not a directory fsync in strict mode
    drop(file);
    fs.power_cut();
    let b = &fs.backing;
    assert_eq!(read(&b.join("a.tmp")).as_deref(), Some(&b"a"[..]));
    assert_eq!(read(&b.join("a")), None);
    assert_eq!(read(&b.join("b")), None);
    assert_eq!(read(&b.join("gone")).as_deref(), Some(&b"unlinked"[..]));

    fs.remount();
    let m = fs.mount.clone();
    fs::rename(m.join("a.tmp"), m.join("a")).unwrap();
    fs::remove_file(m.join("gone")).unwrap();
    sync_dir(&m);
    fs.power_cut();
    assert_eq!(read(&fs.backing.join("a")).as_deref(), Some(&b"a"[..]));
    assert_eq!(read(&fs.backing.join("a.tmp")), None);
    assert_eq!(read(&fs.backing.join("gone")), None);
}

#[test]
fn mmap_writes_need_msync() {
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_in(root.path(), Mode::Strict);
    let m = fs.mount.clone();
    for name in ["careless.idx", "careful.idx"] {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(m.join(name))
            .unwrap();
        file.set_len(3 * 4096).unwrap();
        file.sync_data().unwrap();
    }
    sync_dir(&m);
    for (name, msync) in [("careless.idx", false), ("careful.idx", true)] {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.join(name))
            .unwrap();
        // SAFETY: the file is not changed by anything else while mapped.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file).unwrap() };
        map[10..15].copy_from_slice(b"entry");
        map[4096 + 7] = 0xaa;
        if msync {
            map.flush().unwrap();
        }
    }
    fs.power_cut();
    let careless = read(&fs.backing.join("careless.idx")).unwrap();
    let careful = read(&fs.backing.join("careful.idx")).unwrap();
    assert_eq!(careless.len(), 3 * 4096);
    assert!(
        careless.iter().all(|&b| b == 0),
        "un-msynced mapping writes dropped"
    );
    assert_eq!(&careful[10..15], b"entry");
    assert_eq!(careful[4096 + 7], 0xaa);
}

#[test]
fn torn_mode_keeps_a_random_subset_of_unsynced_pages() {
    const PAGES: usize = 64;
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_in(root.path(), Mode::Torn(0x5eed));
    let m = fs.mount.clone();
    for name in ["careless", "careful"] {
        write_file(&m.join(name), &vec![b'a'; PAGES * 4096], true);
    }
    sync_dir(&m);
    for (name, datasync) in [("careless", false), ("careful", true)] {
        let file = OpenOptions::new().write(true).open(m.join(name)).unwrap();
        file.write_all_at(&vec![b'b'; PAGES * 4096], 0).unwrap();
        if datasync {
            file.sync_data().unwrap();
        }
    }
    eprintln!("{}", fs.power_cut());
    let careless = read(&fs.backing.join("careless")).unwrap();
    let careful = read(&fs.backing.join("careful")).unwrap();
    assert!(careful.iter().all(|&b| b == b'b'));
    assert_eq!(careless.len(), PAGES * 4096);
    let mut kinds = [0usize; 2];
    for page in careless.chunks(4096) {
        let first = page[0];
        assert!(page.iter().all(|&b| b == first), "a page is never split");
        assert!(first == b'a' || first == b'b');
        kinds[usize::from(first == b'b')] += 1;
    }
    assert!(
        kinds[0] > 0 && kinds[1] > 0,
        "a mix of old and new pages: {kinds:?}"
    );
}
