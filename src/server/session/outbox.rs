//! What a session's writer has gathered and not yet sent: answer bytes, and ranges of
//! segment files to send between them with sendfile. Answers that are ready together go out
//! in one write; a file range goes out right after the bytes before it. This is the one
//! place that sends file ranges, for every protocol.

use std::fs::File;
use std::io;
use std::rc::Rc;

use crate::metrics::counters::Metrics;
use crate::server::io::write_all;
use crate::server::sendfile::{open_segment, send_range};
use crate::server::session::Session;
use crate::shard::calls::SendPlan;

/// `length` bytes of a segment file from `position`, holding `records` records.
pub struct FileRange {
    pub file: Rc<File>,
    pub position: u64,
    pub length: u64,
    /// In the active segment (likely in the page cache): sent without populating it first.
    pub hot: bool,
    pub records: u64,
}

impl FileRange {
    /// The range a fetch plan names, from this core's descriptor of its segment file.
    /// `NotFound` when compaction or retention replaced the file since the plan: the caller
    /// plans again (or tells the client to fetch again).
    pub fn of_plan(plan: &SendPlan) -> io::Result<FileRange> {
        Ok(FileRange {
            file: open_segment(&plan.wal_path, plan.file_id)?,
            position: plan.position,
            length: plan.length,
            hot: plan.hot,
            records: plan.records,
        })
    }
}

/// Answer bytes, and file ranges each sent once the bytes before it are.
#[derive(Default)]
pub struct Outbox {
    bytes: Vec<u8>,
    /// Each range with the length of `bytes` when it was added: it goes after those.
    files: Vec<(usize, FileRange)>,
}

impl Outbox {
    /// Where an answer's bytes are encoded.
    pub fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// A file range, to be sent after the bytes gathered so far.
    pub fn file(&mut self, range: FileRange) {
        if range.length > 0 {
            self.files.push((self.bytes.len(), range));
        }
    }

    /// Bytes gathered (file ranges not counted).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.files.is_empty()
    }

    pub fn has_files(&self) -> bool {
        !self.files.is_empty()
    }

    /// Sends everything gathered, in order, and empties the outbox.
    pub async fn send(&mut self, session: &Session) -> io::Result<()> {
        let mut sent = 0;
        for (at, range) in self.files.drain(..) {
            write_all(&session.stream, &self.bytes[sent..at]).await?;
            sent = at;
            send_range(
                &session.stream,
                &range.file,
                range.position,
                range.length,
                range.hot,
            )
            .await?;
            let metrics = &session.shard.metrics;
            Metrics::add(&metrics.bytes_out, range.length);
            Metrics::add(&metrics.records_out, range.records);
        }
        write_all(&session.stream, &self.bytes[sent..]).await?;
        self.bytes.clear();
        Ok(())
    }
}
