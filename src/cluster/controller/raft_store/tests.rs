//! The controller's Raft files on a real file system: what is written is what a restart
//! finds; crashes at each step of the crash table are simulated by putting back the files
//! as they were before the step.

use std::fs;

use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot};
use raft::{GetEntriesContext, Storage};

use super::*;

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        entry_type: EntryType::EntryNormal,
        index,
        term,
        data: format!("data {index}/{term}").into_bytes().into(),
        context: vec![index as u8; (index % 3) as usize].into(),
        ..Entry::default()
    }
}

fn entries(from: u64, to: u64, term: u64) -> Vec<Entry> {
    (from..=to).map(|i| entry(i, term)).collect()
}

fn all(store: &RaftStore) -> Vec<Entry> {
    let (first, last) = (store.first_index().unwrap(), store.last_index().unwrap());
    store
        .entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap()
}

fn hard_state(term: u64, vote: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote,
        commit,
        ..HardState::default()
    }
}

/// A store in a fresh directory with voters 1, 2, 3 and entries 1..=5 of term 1.
fn five_entries() -> (tempfile::TempDir, PathBuf, RaftStore) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = controller_dir(tmp.path());
    let mut store = RaftStore::open(&dir).unwrap();
    store.initialize(&[1, 2, 3]).unwrap();
    store.append(&entries(1, 5, 1)).unwrap();
    (tmp, dir, store)
}

#[test]
fn a_restart_recovers_exactly_what_was_written() {
    let (_tmp, dir, mut store) = five_entries();
    store.set_hard_state(&hard_state(2, 1, 3)).unwrap();
    // A new leader's entries replace the uncommitted tail 4..=5.
    store.append(&entries(4, 6, 2)).unwrap();
    let before = all(&store);
    drop(store);

    let store = RaftStore::open(&dir).unwrap();
    let state = store.initial_state().unwrap();
    assert_eq!(state.hard_state, hard_state(2, 1, 3));
    assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
    assert_eq!(all(&store), before);
    let expected: Vec<Entry> = entries(1, 3, 1)
        .into_iter()
        .chain(entries(4, 6, 2))
        .collect();
    assert_eq!(before, expected);
    assert_eq!(
        (store.first_index().unwrap(), store.last_index().unwrap()),
        (1, 6)
    );
    assert_eq!(store.term(3).unwrap(), 1);
    assert_eq!(store.term(4).unwrap(), 2);
    assert!(store.term(7).is_err());
    // max_size keeps at least one entry.
    let one = store
        .entries(1, 7, 1, GetEntriesContext::empty(false))
        .unwrap();
    assert_eq!(one.len(), 1);
}

#[test]
fn a_new_store_is_empty_and_initialized_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = controller_dir(tmp.path());
    let mut store = RaftStore::open(&dir).unwrap();
    assert!(!store.is_initialized());
    assert_eq!(
        (store.first_index().unwrap(), store.last_index().unwrap()),
        (1, 0)
    );
    store.initialize(&[1, 2, 3]).unwrap();
    drop(store);
    let mut store = RaftStore::open(&dir).unwrap();
    assert!(store.is_initialized());
    let err = store.initialize(&[1, 2]).unwrap_err();
    assert!(
        matches!(err, RaftStoreError::AlreadyInitialized { ref voters } if voters == &[1, 2, 3])
    );
}

/// Changes a log file's bytes; gets the offset where the last record starts.
type Tear = fn(&mut Vec<u8>, usize);

/// Each shape a crash can leave at the end of `log` is cut off at the last whole record,
/// and the log takes appends after it.
#[test]
fn a_torn_tail_is_dropped() {
    let cases: [(&str, Tear); 4] = [
        ("record cut short", |log, last_start| {
            log.truncate(last_start + 11)
        }),
        ("header cut short", |log, last_start| {
            log.truncate(last_start + 3)
        }),
        ("zeros past the end", |log, _| {
            log.extend_from_slice(&[0; 700])
        }),
        ("last record's bytes changed", |log, _| {
            let at = log.len() - 2;
            log[at] ^= 0x40;
        }),
    ];
    for (case, tear) in cases {
        let (_tmp, dir, store) = five_entries();
        let last_start = store.ends[3] as usize;
        drop(store);
        let path = dir.join(LOG_FILE);
        let mut log = fs::read(&path).unwrap();
        tear(&mut log, last_start);
        fs::write(&path, &log).unwrap();

        let mut store = RaftStore::open(&dir).unwrap();
        let kept = if case == "zeros past the end" { 5 } else { 4 };
        assert_eq!(all(&store), entries(1, kept, 1), "{case}");
        let len = fs::metadata(&path).unwrap().len();
        assert_eq!(
            len,
            store.ends[kept as usize - 1],
            "{case}: the file was cut"
        );
        store.append(&entries(kept + 1, 8, 2)).unwrap();
        drop(store);
        let store = RaftStore::open(&dir).unwrap();
        assert_eq!(store.last_index().unwrap(), 8, "{case}");
        assert_eq!(store.term(8).unwrap(), 2, "{case}");
    }
}

#[test]
fn a_damaged_middle_is_refused_with_its_place() {
    let (_tmp, dir, store) = five_entries();
    let second = store.ends[0];
    drop(store);
    let path = dir.join(LOG_FILE);
    let mut log = fs::read(&path).unwrap();
    log[second as usize + 12] ^= 0x01; // inside entry 2's payload
    fs::write(&path, &log).unwrap();

    let err = RaftStore::open(&dir).unwrap_err();
    match &err {
        RaftStoreError::Damaged {
            path: p, offset, ..
        } => {
            assert_eq!(p, &path);
            assert_eq!(*offset, second);
        }
        other => panic!("expected Damaged, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("damaged at byte") && text.contains("refuses to start"),
        "{text}"
    );
    assert_eq!(fs::read(&path).unwrap(), log, "nothing was cut");
}

#[test]
fn a_torn_tail_that_would_lose_committed_entries_is_refused() {
    let (_tmp, dir, mut store) = five_entries();
    store.set_commit(5).unwrap();
    let fourth_end = store.ends[3];
    drop(store);
    let path = dir.join(LOG_FILE);
    let log = fs::read(&path).unwrap();
    fs::write(&path, &log[..fourth_end as usize + 5]).unwrap();
    let err = RaftStore::open(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            RaftStoreError::CommitBeyondLog {
                commit: 5,
                last_index: 4
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_damaged_raft_state_is_refused() {
    let (_tmp, dir, store) = five_entries();
    drop(store);
    let path = dir.join(STATE_FILE);
    let mut bytes = fs::read(&path).unwrap();
    bytes[8] ^= 1;
    fs::write(&path, &bytes).unwrap();
    let err = RaftStore::open(&dir).unwrap_err();
    assert!(
        matches!(&err, RaftStoreError::Damaged { reason: "file CRC", path: p, .. } if p == &path),
        "{err:?}"
    );
}

#[test]
fn a_snapshot_compacts_the_log_and_survives_a_restart() {
    let (_tmp, dir, mut store) = five_entries();
    store.set_hard_state(&hard_state(1, 1, 4)).unwrap();
    let log_before = fs::metadata(dir.join(LOG_FILE)).unwrap().len();
    let conf = ConfState::from((vec![1, 2, 3], vec![]));
    store
        .create_snapshot(3, conf.clone(), b"state at 3".to_vec())
        .unwrap();
    assert!(fs::metadata(dir.join(LOG_FILE)).unwrap().len() < log_before);
    assert!(
        store.create_snapshot(5, conf.clone(), vec![]).is_err(),
        "5 is not committed"
    );
    drop(store);

    let store = RaftStore::open(&dir).unwrap();
    assert_eq!(
        (store.first_index().unwrap(), store.last_index().unwrap()),
        (4, 5)
    );
    assert_eq!(store.term(3).unwrap(), 1, "the snapshot's term");
    assert!(matches!(
        store.entries(2, 4, None, GetEntriesContext::empty(false)),
        Err(raft::Error::Store(raft::StorageError::Compacted))
    ));
    let snap = store.snapshot(0, 2).unwrap();
    assert_eq!(snap.get_metadata().index, 3);
    assert_eq!(&snap.data[..], b"state at 3");
    assert_eq!(snap.get_metadata().get_conf_state(), &conf);
    assert_eq!(all(&store), entries(4, 5, 1));
}

#[test]
fn a_crash_before_compaction_rewrote_the_log_is_finished_at_open() {
    let (_tmp, dir, mut store) = five_entries();
    store.set_commit(4).unwrap();
    let old_log = fs::read(dir.join(LOG_FILE)).unwrap();
    let conf = store.conf_state().clone();
    store.create_snapshot(4, conf, b"s4".to_vec()).unwrap();
    drop(store);
    // Step 1 (snapshot) done, step 2 (log rewrite) lost.
    fs::write(dir.join(LOG_FILE), &old_log).unwrap();

    let store = RaftStore::open(&dir).unwrap();
    assert_eq!(all(&store), entries(5, 5, 1));
    assert_eq!(store.first_index().unwrap(), 5);
    assert!(fs::metadata(dir.join(LOG_FILE)).unwrap().len() < old_log.len() as u64);
}

fn leader_snapshot(index: u64, term: u64, voters: Vec<u64>) -> Snapshot {
    let mut snap = Snapshot {
        data: b"leader's state".to_vec().into(),
        ..Snapshot::default()
    };
    snap.mut_metadata().index = index;
    snap.mut_metadata().term = term;
    snap.mut_metadata()
        .set_conf_state(ConfState::from((voters, vec![])));
    snap
}

#[test]
fn a_snapshot_from_the_leader_replaces_the_log() {
    let (_tmp, dir, mut store) = five_entries();
    store.set_hard_state(&hard_state(1, 0, 2)).unwrap();
    store
        .apply_snapshot(leader_snapshot(9, 3, vec![1, 2, 3, 4]))
        .unwrap();
    store.append(&entries(10, 11, 3)).unwrap();
    drop(store);

    let store = RaftStore::open(&dir).unwrap();
    assert_eq!(
        (store.first_index().unwrap(), store.last_index().unwrap()),
        (10, 11)
    );
    assert_eq!(store.hard_state(), &hard_state(3, 0, 9));
    assert_eq!(store.conf_state().voters, vec![1, 2, 3, 4]);
    assert_eq!(store.term(9).unwrap(), 3);
}

#[test]
fn a_crash_after_only_the_leaders_snapshot_was_written_is_finished_at_open() {
    let (_tmp, dir, mut store) = five_entries();
    store.set_hard_state(&hard_state(1, 0, 2)).unwrap();
    let old_log = fs::read(dir.join(LOG_FILE)).unwrap();
    let old_state = fs::read(dir.join(STATE_FILE)).unwrap();
    // A snapshot at 4 of another term: the local entries do not follow it.
    store
        .apply_snapshot(leader_snapshot(4, 2, vec![1, 2, 3, 4]))
        .unwrap();
    drop(store);
    fs::write(dir.join(LOG_FILE), &old_log).unwrap();
    fs::write(dir.join(STATE_FILE), &old_state).unwrap();

    let store = RaftStore::open(&dir).unwrap();
    assert_eq!(
        (store.first_index().unwrap(), store.last_index().unwrap()),
        (5, 4)
    );
    assert_eq!(store.hard_state(), &hard_state(2, 0, 4));
    assert_eq!(store.conf_state().voters, vec![1, 2, 3, 4]);
    assert_eq!(fs::metadata(dir.join(LOG_FILE)).unwrap().len(), 0);
}

#[test]
fn appends_that_leave_a_gap_or_are_too_large_are_refused() {
    let (_tmp, _dir, mut store) = five_entries();
    assert!(matches!(
        store.append(&entries(7, 7, 1)),
        Err(RaftStoreError::NotContiguous {
            first: 7,
            log_first: 1,
            log_last: 5
        })
    ));
    let mut big = entry(6, 1);
    big.data = vec![0; MAX_ENTRY_BYTES + 1].into();
    assert!(matches!(
        store.append(&[big]),
        Err(RaftStoreError::EntryTooLarge { index: 6, .. })
    ));
    assert_eq!(store.last_index().unwrap(), 5);
}
