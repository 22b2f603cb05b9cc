//! Leader epochs on real files.

use super::*;

fn e(epoch: u64, start_offset: u64) -> EpochStart {
    EpochStart {
        epoch,
        start_offset,
    }
}

#[test]
fn epochs_answer_terms_and_ends_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut epochs = LeaderEpochs::load(dir.path()).unwrap();
    assert_eq!(epochs.latest(), None);
    assert_eq!(epochs.end_of(3, 0), None);
    assert!(epochs.assign(dir.path(), 1, 0).unwrap());
    assert!(
        !epochs.assign(dir.path(), 1, 40).unwrap(),
        "already the newest"
    );
    assert!(epochs.assign(dir.path(), 3, 100).unwrap());
    assert!(epochs.assign(dir.path(), 4, 250).unwrap());
    assert_eq!(epochs.entries(), &[e(1, 0), e(3, 100), e(4, 250)]);
    assert_eq!(epochs.epoch_at(0), Some(1));
    assert_eq!(epochs.epoch_at(99), Some(1));
    assert_eq!(epochs.epoch_at(100), Some(3));
    assert_eq!(epochs.epoch_at(1000), Some(4));
    // Epoch 2 never led here: the answer is the largest epoch below it, ending where the
    // next one began.
    assert_eq!(epochs.end_of(2, 300), Some((1, 100)));
    assert_eq!(epochs.end_of(3, 300), Some((3, 250)));
    assert_eq!(epochs.end_of(9, 300), Some((4, 300)));
    assert_eq!(epochs.end_of(0, 300), None);
    // Durable: read back as written.
    assert_eq!(LeaderEpochs::load(dir.path()).unwrap(), epochs);
}

#[test]
fn a_cut_and_a_new_leader_drop_the_tail_the_log_no_longer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut epochs = LeaderEpochs::default();
    for (epoch, start) in [(1, 0), (3, 100), (4, 250), (6, 400)] {
        epochs.assign(dir.path(), epoch, start).unwrap();
    }
    // The log was cut at 250: epochs 4 and 6 began at or past it.
    epochs.truncate_from(dir.path(), 250).unwrap();
    assert_eq!(epochs.entries(), &[e(1, 0), e(3, 100)]);
    // A crash after a cut of the log at 120 but before the epochs' cut: the new leader's
    // epoch replaces what began past its start, and an older epoch it brings (its log's
    // batches at 120 are of epoch 3 too) changes nothing.
    let mut stale = epochs.clone();
    stale.assign(dir.path(), 5, 200).unwrap();
    assert!(stale.assign(dir.path(), 7, 120).unwrap());
    assert_eq!(stale.entries(), &[e(1, 0), e(3, 100), e(7, 120)]);
    // A leader of a smaller epoch than one recorded here can only come after a cut: the
    // newer epochs go.
    assert!(stale.assign(dir.path(), 5, 130).unwrap());
    assert_eq!(stale.entries(), &[e(1, 0), e(3, 100), e(5, 130)]);
    assert_eq!(LeaderEpochs::load(dir.path()).unwrap(), stale);
}

#[test]
fn damaged_files_are_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut epochs = LeaderEpochs::default();
    epochs.assign(dir.path(), 2, 0).unwrap();
    epochs.assign(dir.path(), 3, 17).unwrap();
    let path = dir.path().join(EPOCHS_FILE);
    let good = std::fs::read_to_string(&path).unwrap();
    // A right checksum over a wrong first line.
    let wrong_format = {
        let body = "pagurus-leader-epochs 2\n3 17\n";
        format!("{body}crc {:08x}\n", crc32c::crc32c(body.as_bytes()))
    };
    let damaged = [
        good.replace("3 17", "3 18"),  // rot: the checksum disagrees
        good.replace("crc ", "crc x"), // no checksum
        String::new(),
        wrong_format,
    ];
    for (i, text) in damaged.iter().enumerate() {
        std::fs::write(&path, text).unwrap();
        match LeaderEpochs::load(dir.path()) {
            Err(StorageError::Damaged { path: named, .. }) => assert_eq!(named, path),
            other => panic!("damage {i} not refused: {other:?}"),
        }
    }
    // Out of order under a right checksum.
    std::fs::write(&path, render(&[e(3, 17), e(2, 20)])).unwrap();
    assert!(matches!(
        LeaderEpochs::load(dir.path()),
        Err(StorageError::Damaged { .. })
    ));
    std::fs::write(&path, good).unwrap();
    assert_eq!(LeaderEpochs::load(dir.path()).unwrap(), epochs);
}

#[test]
fn the_number_of_epochs_is_bounded() {
    // On tmpfs where there is one: each assign is a durable write.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let mut epochs = LeaderEpochs::default();
    for i in 0..EPOCHS_MAX as u64 + 3 {
        epochs.assign(dir.path(), i + 1, i * 10).unwrap();
    }
    assert_eq!(epochs.entries().len(), EPOCHS_MAX);
    assert_eq!(epochs.entries()[0], e(4, 30));
    assert_eq!(LeaderEpochs::load(dir.path()).unwrap(), epochs);
}
