//! raft-rs logs through `slog`; the broker logs through `tracing`. [`logger`] makes the
//! `slog::Logger` a `RawNode` needs, whose records become `tracing` events (target
//! `pagurus::cluster::raft`) with raft-rs's key-values in the message, so elections and
//! leader changes show in the broker's log like everything else.

use std::fmt::{self, Write as _};

use slog::{Drain, KV as _, Level, OwnedKVList, Record};

/// A `slog::Logger` for one Raft group on one node; `group` and `node` are in every line.
pub fn logger(group: u64, node: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("group" => group, "node" => node))
}

/// Hands slog records to `tracing`.
struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut line = String::new();
        let _ = write!(line, "{}", record.msg());
        let mut kv = KvText(&mut line);
        // Formatting into a String cannot fail; a KV that does anyway loses only its text.
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        match record.level() {
            Level::Critical | Level::Error => {
                tracing::error!(target: "pagurus::cluster::raft", "{line}")
            }
            Level::Warning => tracing::warn!(target: "pagurus::cluster::raft", "{line}"),
            Level::Info => tracing::info!(target: "pagurus::cluster::raft", "{line}"),
            Level::Debug => tracing::debug!(target: "pagurus::cluster::raft", "{line}"),
            Level::Trace => tracing::trace!(target: "pagurus::cluster::raft", "{line}"),
        }
        Ok(())
    }
}

/// Appends ` key=value` for each pair.
struct KvText<'a>(&'a mut String);

impl slog::Serializer for KvText<'_> {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}
