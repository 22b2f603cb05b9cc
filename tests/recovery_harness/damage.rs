//! The scenario the property test draws, the layout a crash left on disk, and what a
//! damage must cost.

use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

// ---------------------------------------------------------------------------------------
// The scenario

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// Any byte of any segment file (see the module docs for index bytes).
    Anywhere,
    /// Only bytes written after the K durable batches.
    Unsynced,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ext {
    Wal,
    Idx,
}

/// A segment and a byte in it, chosen among the eligible ones by remainder once the layout
/// is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    pub segment: u64,
    pub byte: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    None,
    /// Truncate a `.wal`, an `.idx`, or both (of the same or of different segments).
    Truncate {
        wal: Option<Pick>,
        idx: Option<Pick>,
    },
    FlipBit {
        ext: Ext,
        at: Pick,
        bit: u8,
    },
    /// Zero every byte from the picked one to the end of the file.
    ZeroTail {
        ext: Ext,
        at: Pick,
    },
    DeleteIdx {
        segment: u64,
    },
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub segment_bytes: u64,
    pub index_entries: u32,
    pub durable: Vec<Batch>,
    pub volatile: Vec<Batch>,
    pub region: Region,
    pub damage: Damage,
    pub read_max_bytes: u64,
}

pub fn batch_strategy() -> impl Strategy<Value = Batch> {
    (
        prop_oneof![Just(0u64), 1u64..1 << 62],
        vec(any::<u8>(), 0..=40),
        vec(any::<u8>(), 0..=300),
        0u32..=5,
    )
        .prop_map(|(timestamp_ns, key, payload, record_count)| Batch {
            timestamp_ns,
            key,
            payload,
            record_count,
        })
}

pub fn pick() -> impl Strategy<Value = Pick> {
    (0u64..64, 0u64..1 << 20).prop_map(|(segment, byte)| Pick { segment, byte })
}

pub fn ext() -> impl Strategy<Value = Ext> {
    prop_oneof![Just(Ext::Wal), Just(Ext::Idx)]
}

pub fn damage_strategy() -> impl Strategy<Value = Damage> {
    prop_oneof![
        1 => Just(Damage::None),
        3 => (pick(), pick(), 0u8..3).prop_map(|(w, i, which)| Damage::Truncate {
            wal: (which != 1).then_some(w),
            idx: (which != 0).then_some(i),
        }),
        3 => (ext(), pick(), 0u8..8).prop_map(|(ext, at, bit)| Damage::FlipBit { ext, at, bit }),
        2 => (ext(), pick()).prop_map(|(ext, at)| Damage::ZeroTail { ext, at }),
        1 => (0u64..64).prop_map(|segment| Damage::DeleteIdx { segment }),
    ]
}

pub fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    (
        // Small segments and indexes, so that segments roll often.
        prop_oneof![512u64..=1024, 512u64..=4096],
        prop_oneof![4u32..=8, 4u32..=64],
        vec(batch_strategy(), 0..=16),
        vec(batch_strategy(), 0..=16),
        prop_oneof![Just(Region::Anywhere), Just(Region::Unsynced)],
        damage_strategy(),
        1u64..=4096,
    )
        .prop_map(
            |(segment_bytes, index_entries, durable, volatile, region, damage, read_max_bytes)| {
                Scenario {
                    segment_bytes,
                    index_entries,
                    durable,
                    volatile,
                    region,
                    damage,
                    read_max_bytes,
                }
            },
        )
}

// ---------------------------------------------------------------------------------------
// The layout on disk before the damage, and what the damage must cost

/// One segment as the second crash left it.
#[derive(Debug)]
pub struct SegmentLayout {
    pub base: u64,
    pub wal_len: u64,
    pub idx_len: u64,
    /// Numbers (in append order) of the batches it holds.
    pub batches: Vec<usize>,
}

#[derive(Debug)]
pub struct Layout {
    pub dir: PathBuf,
    pub segments: Vec<SegmentLayout>,
    /// Per batch: segment number, WAL position, length.
    pub placement: Vec<(usize, u64, u64)>,
    /// Where the unsynced bytes start: segment number, `.wal` and `.idx` byte positions.
    pub unsynced: (usize, u64, u64),
    /// Number of the first segment at or above the recovery point: the ones below were sealed
    /// before the last open, and recovery only checks them cheaply.
    pub first_scanned: usize,
}

impl Layout {
    pub fn new(dir: &Path, bases: &[u64], appended: &[Batch], durable: usize) -> Outcome<Layout> {
        let mut segments: Vec<SegmentLayout> = bases
            .iter()
            .map(|&base| SegmentLayout {
                base,
                wal_len: fs::metadata(wal_path(dir, base)).map_or(0, |m| m.len()),
                idx_len: fs::metadata(idx_path(dir, base)).map_or(0, |m| m.len()),
                batches: Vec::new(),
            })
            .collect();
        let mut placement = Vec::with_capacity(appended.len());
        let mut position = 0u64;
        let mut current = 0usize;
        for (i, (batch, offset)) in appended.iter().zip(offsets_of(appended)).enumerate() {
            let segment = bases.partition_point(|&b| b <= offset) - 1;
            if segment != current {
                current = segment;
                position = 0;
            }
            placement.push((segment, position, batch.len()));
            segments[segment].batches.push(i);
            position += batch.len();
        }
        for s in &segments {
            let end = s
                .batches
                .last()
                .map_or(0, |&b| placement[b].1 + placement[b].2);
            ensure!(
                end == s.wal_len,
                "layout: segment {} holds {} WAL bytes, the appends put {end} there",
                s.base,
                s.wal_len
            );
        }
        let unsynced = match durable.checked_sub(1) {
            None => (0, 0, 0),
            Some(last) => {
                let (segment, position, length) = placement[last];
                let entries = segments[segment]
                    .batches
                    .iter()
                    .filter(|&&b| b <= last)
                    .count();
                (segment, position + length, (entries * ENTRY_LEN) as u64)
            }
        };
        ensure!(
            dir.join(RECOVERY_POINT).exists(),
            "layout: no recovery point"
        );
        let recovery_point = read_recovery_point(dir).opened;
        let first_scanned = bases.partition_point(|&b| b < recovery_point);
        // The second open made the segment holding the last durable batch active.
        ensure!(
            first_scanned == unsynced.0 && bases[first_scanned] == recovery_point,
            "layout: recovery point {recovery_point}, segments {bases:?}, the last durable batch \
             is in segment number {}",
            unsynced.0
        );
        Ok(Layout {
            dir: dir.to_path_buf(),
            segments,
            placement,
            unsynced,
            first_scanned,
        })
    }

    pub fn total(&self) -> usize {
        self.placement.len()
    }

    pub fn path(&self, segment: usize, ext: Ext) -> PathBuf {
        let base = self.segments[segment].base;
        match ext {
            Ext::Wal => wal_path(&self.dir, base),
            Ext::Idx => idx_path(&self.dir, base),
        }
    }

    /// Resolves a pick to a segment number and a byte of its `ext` file in the region, or
    /// `None` if the region holds no byte of such a file. `content` damage (a changed byte,
    /// not a cut) to an index is drawn only from segments recovery scans.
    pub fn resolve(
        &self,
        region: Region,
        ext: Ext,
        pick: Pick,
        content: bool,
    ) -> Option<(usize, u64)> {
        let first = match region {
            Region::Unsynced => self.unsynced.0,
            Region::Anywhere if content && ext == Ext::Idx => self.first_scanned,
            Region::Anywhere => 0,
        };
        let segment = first + pick.segment as usize % (self.segments.len() - first);
        let s = &self.segments[segment];
        let lo = match (region, ext) {
            (Region::Unsynced, Ext::Wal) if segment == first => self.unsynced.1,
            (Region::Unsynced, Ext::Idx) if segment == first => self.unsynced.2,
            _ => 0,
        };
        let hi = match ext {
            Ext::Wal => s.wal_len,
            // The active index is sparse up to its capacity: aim at the entries and two empty
            // slots after them, not at kilobytes of zeros.
            Ext::Idx => s.idx_len.min(((s.batches.len() + 2) * ENTRY_LEN) as u64),
        };
        (lo < hi).then(|| (segment, lo + pick.byte % (hi - lo)))
    }

    /// Number of the first batch of `segment` whose bytes reach past WAL position `p`.
    pub fn batch_at_wal(&self, segment: usize, p: u64) -> usize {
        self.segments[segment]
            .batches
            .iter()
            .copied()
            .find(|&b| self.placement[b].1 + self.placement[b].2 > p)
            .expect("a WAL position inside the file is inside a batch")
    }

    /// Number of the batch whose index slot holds `.idx` byte `p`, if there is one.
    pub fn batch_at_idx(&self, segment: usize, p: u64) -> Option<usize> {
        self.segments[segment]
            .batches
            .get(p as usize / ENTRY_LEN)
            .copied()
    }

    /// WAL byte range of batch `b`.
    pub fn range(&self, b: usize) -> std::ops::Range<usize> {
        let (_, position, length) = self.placement[b];
        position as usize..(position + length) as usize
    }
}

/// What the damage did and what recovery must make of it.
#[derive(Debug, Default)]
pub struct Applied {
    pub description: Vec<String>,
    /// Exactly this many batches survive a scan of the damaged segment.
    pub keep: usize,
    /// Batches damaged in a closed segment or one below the recovery point (bit rot): recovery
    /// may cut before the first, or keep everything and report each as corrupt on read.
    pub rot: Vec<usize>,
    /// A batch whose entry changed in a closed segment: recovery may cut before it, or keep
    /// everything and either refuse it as corrupt (its CRC, offset, length or record count
    /// disagree) or serve it intact (its bytes still match: only its timestamp changed).
    pub index_rot: Option<usize>,
}

/// How many batches survive when `.idx` slot `p / 32` of `segment` changes from `before` to
/// `after`, the slots after it being intact or empty: all of them if the slot is unchanged
/// or lies past the last batch (it is dropped); else the batches before it. A slot that now
/// reads as empty cuts there too: inside the file, an empty slot is an entry that never
/// became durable (`storage::recovery`, `Unindexed`).
pub fn keep_after_slot_change(
    layout: &Layout,
    segment: usize,
    p: u64,
    before: &[u8],
    after: &[u8],
) -> usize {
    match layout.batch_at_idx(segment, p) {
        Some(batch) if before != after => batch,
        _ => layout.total(),
    }
}

pub fn apply(layout: &Layout, region: Region, damage: Damage) -> Applied {
    let mut applied = Applied::default();
    let mut describe = |path: &Path, what: String| {
        let name = path.file_name().unwrap().to_string_lossy();
        applied.description.push(format!("{what} {name}"));
    };
    let mut keep = layout.total();
    let mut changed_wal: Option<(usize, Vec<usize>)> = None;
    let mut changed_idx: Option<usize> = None;
    match damage {
        Damage::None => {}
        Damage::Truncate { wal, idx } => {
            let wal = wal.and_then(|w| layout.resolve(region, Ext::Wal, w, false));
            let mut idx = idx.and_then(|i| layout.resolve(region, Ext::Idx, i, false));
            if let (Some((ws, p)), Some((is, q))) = (wal, idx) {
                // The one combination left out (see the module docs): both files of a segment
                // that is not the last cut so that they agree.
                let at_boundary = layout.segments[ws]
                    .batches
                    .iter()
                    .any(|&b| layout.range(b).end as u64 == p);
                let slots_before = layout.segments[ws]
                    .batches
                    .iter()
                    .filter(|&&b| (layout.range(b).end as u64) <= p)
                    .count();
                if ws == is
                    && ws + 1 < layout.segments.len()
                    && (p == 0 || at_boundary)
                    && q as usize / ENTRY_LEN <= slots_before
                {
                    idx = None;
                }
            }
            if let Some((segment, p)) = wal {
                let path = layout.path(segment, Ext::Wal);
                truncate(&path, p);
                describe(&path, format!("truncated to {p} bytes:"));
                keep = layout.batch_at_wal(segment, p);
            }
            if let Some((segment, p)) = idx {
                let path = layout.path(segment, Ext::Idx);
                truncate(&path, p);
                describe(&path, format!("truncated to {p} bytes:"));
                // The missing entries are rebuilt from the intact WAL.
            }
        }
        Damage::FlipBit { ext, at, bit } => {
            if let Some((segment, p)) = layout.resolve(region, ext, at, true) {
                let path = layout.path(segment, ext);
                let before = read_file(&path);
                flip_bit(&path, p, bit);
                describe(
                    &path,
                    format!(
                        "flipped bit {bit} of byte {p} ({:#04x}) of",
                        before[p as usize]
                    ),
                );
                keep = match ext {
                    Ext::Wal => {
                        let b = layout.batch_at_wal(segment, p);
                        changed_wal = Some((segment, vec![b]));
                        b
                    }
                    Ext::Idx => {
                        changed_idx = Some(segment);
                        let slot = p as usize / ENTRY_LEN * ENTRY_LEN;
                        let old = &before[slot..slot + ENTRY_LEN];
                        let mut new = old.to_vec();
                        new[p as usize - slot] ^= 1 << bit;
                        keep_after_slot_change(layout, segment, p, old, &new)
                    }
                };
            }
        }
        Damage::ZeroTail { ext, at } => {
            if let Some((segment, p)) = layout.resolve(region, ext, at, true) {
                let path = layout.path(segment, ext);
                let before = read_file(&path);
                let len = before.len() - p as usize;
                write_at(&path, &vec![0u8; len], p);
                describe(&path, format!("zeroed bytes {p}.. ({len} bytes) of"));
                keep = match ext {
                    Ext::Wal => {
                        // Only batches with a byte that really changed are damaged.
                        let changed: Vec<usize> = layout.segments[segment]
                            .batches
                            .iter()
                            .copied()
                            .filter(|&b| {
                                let r = layout.range(b);
                                r.end > p as usize
                                    && before[r.start.max(p as usize)..r.end]
                                        .iter()
                                        .any(|&x| x != 0)
                            })
                            .collect();
                        let first = changed.first().copied().unwrap_or(layout.total());
                        changed_wal = Some((segment, changed));
                        first
                    }
                    Ext::Idx => {
                        changed_idx = Some(segment);
                        // The zeros run to the end of the file, so every slot after the
                        // picked one is zeroed too, not only the one holding byte `p`: a
                        // later slot that held an entry now reads as empty inside the file,
                        // which recovery cuts (`Unindexed`). The first slot that changed
                        // decides (slots map to batches in order).
                        let first = p as usize / ENTRY_LEN * ENTRY_LEN;
                        (first..before.len())
                            .step_by(ENTRY_LEN)
                            .map(|slot| {
                                let old = &before[slot..(slot + ENTRY_LEN).min(before.len())];
                                let mut new = old.to_vec();
                                new[(p as usize).max(slot) - slot..].fill(0);
                                let at = (p as usize).max(slot) as u64;
                                keep_after_slot_change(layout, segment, at, old, &new)
                            })
                            .min()
                            .unwrap_or(layout.total())
                    }
                };
            }
        }
        Damage::DeleteIdx { segment } => {
            // Under `Unsynced`, only an index that holds no durable entry.
            let first = match region {
                Region::Anywhere => 0,
                Region::Unsynced if layout.unsynced.1 == 0 => layout.unsynced.0,
                Region::Unsynced => layout.unsynced.0 + 1,
            };
            if first < layout.segments.len() {
                let segment = first + segment as usize % (layout.segments.len() - first);
                let path = layout.path(segment, Ext::Idx);
                fs::remove_file(&path)
                    .unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
                describe(&path, "deleted".to_string());
            }
        }
    }
    applied.keep = keep;
    // A closed segment (not the last) whose index still chains is never cut: what fails its
    // check is served as corrupt instead. Whether the chain still holds after index damage
    // the model does not work out, so either outcome is accepted for it.
    let closed = |segment: usize| segment + 1 < layout.segments.len();
    if let Some((segment, changed)) = changed_wal
        && (segment < layout.first_scanned || closed(segment))
    {
        applied.rot = changed;
    }
    if let Some(segment) = changed_idx
        && closed(segment)
        && keep < layout.total()
    {
        applied.index_rot = Some(keep);
    }
    applied
}
