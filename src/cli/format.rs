//! How `pagurus consume` prints a record: raw bytes, one JSON object, or a template in the
//! style of kcat's `-f` (`%t %p %o %k %s %T`...).

use std::io::Write;

use base64::Engine;

/// One record as `consume` prints it.
pub struct Record<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub offset: u64,
    pub timestamp_ms: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// `--format`: `raw`, `json`, or a template with at least one `%` directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Raw,
    Json,
    Template(Vec<Piece>),
}

/// A part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
    KeyLength,
    Value,
    ValueLength,
}

/// What a template may hold; shown by `--help` and in errors.
pub const TEMPLATE_HELP: &str = "%t topic, %p partition, %o offset, %T timestamp (ms), %k key, %K key length, %s value, %S value length, %% a percent sign; \\n newline, \\t tab, \\\\ backslash";

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "raw" => Ok(Format::Raw),
            "json" => Ok(Format::Json),
            template if template.contains('%') => parse_template(template).map(Format::Template),
            other => Err(format!(
                "{other:?} is not raw, json or a template with % directives ({TEMPLATE_HELP})"
            )),
        }
    }
}

fn parse_template(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = Vec::new();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        let directive = match c {
            '%' => match chars.next() {
                Some('t') => Piece::Topic,
                Some('p') => Piece::Partition,
                Some('o') => Piece::Offset,
                Some('T') => Piece::Timestamp,
                Some('k') => Piece::Key,
                Some('K') => Piece::KeyLength,
                Some('s') => Piece::Value,
                Some('S') => Piece::ValueLength,
                Some('%') => {
                    text.push(b'%');
                    continue;
                }
                Some(other) => return Err(format!("unknown directive %{other} ({TEMPLATE_HELP})")),
                None => return Err(format!("the template ends in a lone % ({TEMPLATE_HELP})")),
            },
            '\\' => {
                match chars.next() {
                    Some('n') => text.push(b'\n'),
                    Some('t') => text.push(b'\t'),
                    Some('r') => text.push(b'\r'),
                    Some('0') => text.push(0),
                    Some('\\') => text.push(b'\\'),
                    // Anything else stays as typed.
                    Some(other) => {
                        text.push(b'\\');
                        let mut buf = [0; 4];
                        text.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                    }
                    None => text.push(b'\\'),
                }
                continue;
            }
            other => {
                let mut buf = [0; 4];
                text.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                continue;
            }
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(directive);
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

impl Format {
    /// Writes one record. A template prints exactly what it says (end it with `\n` for one
    /// record per line), as kcat's `-f` does.
    pub fn write(&self, out: &mut impl Write, r: &Record<'_>) -> std::io::Result<()> {
        match self {
            Format::Raw => {
                out.write_all(r.value)?;
                out.write_all(b"\n")
            }
            Format::Json => {
                let (key, key_encoding) = json_bytes(r.key);
                let (value, value_encoding) = json_bytes(r.value);
                let object = serde_json::json!({
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp_ms,
                    "key": key,
                    "key_encoding": key_encoding,
                    "value": value,
                    "value_encoding": value_encoding,
                });
                serde_json::to_writer(&mut *out, &object)?;
                out.write_all(b"\n")
            }
            Format::Template(pieces) => {
                for piece in pieces {
                    match piece {
                        Piece::Text(text) => out.write_all(text)?,
                        Piece::Topic => out.write_all(r.topic.as_bytes())?,
                        Piece::Partition => write!(out, "{}", r.partition)?,
                        Piece::Offset => write!(out, "{}", r.offset)?,
                        Piece::Timestamp => write!(out, "{}", r.timestamp_ms)?,
                        Piece::Key => out.write_all(r.key)?,
                        Piece::KeyLength => write!(out, "{}", r.key.len())?,
                        Piece::Value => out.write_all(r.value)?,
                        Piece::ValueLength => write!(out, "{}", r.value.len())?,
                    }
                }
                Ok(())
            }
        }
    }
}

/// Bytes as a JSON string: as they are when they are UTF-8, else in base64 (standard
/// alphabet, padded); the second value names which.
fn json_bytes(bytes: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), "utf8"),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(bytes),
            "base64",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(format: &str, record: &Record<'_>) -> Vec<u8> {
        let format: Format = format.parse().unwrap();
        let mut out = Vec::new();
        format.write(&mut out, record).unwrap();
        out
    }

    const RECORD: Record<'static> = Record {
        topic: "orders",
        partition: 2,
        offset: 41,
        timestamp_ms: 1_700_000_000_123,
        key: b"k1",
        value: b"v\xff",
    };

    #[test]
    fn templates_expand_every_directive() {
        assert_eq!(
            render("%t/%p@%o %T %k(%K)=%s(%S) 100%%\\n", &RECORD),
            b"orders/2@41 1700000000123 k1(2)=v\xff(2) 100%\n"
        );
        assert_eq!(render("%s", &RECORD), b"v\xff");
        assert_eq!(render("\\t%o\\q\\", &RECORD), b"\t41\\q\\");
        assert_eq!(render("é%o", &RECORD), "é41".as_bytes());
    }

    #[test]
    fn bad_templates_are_refused() {
        assert!(
            "%x".parse::<Format>()
                .unwrap_err()
                .contains("unknown directive %x")
        );
        assert!("key %".parse::<Format>().unwrap_err().contains("lone %"));
        assert!(
            "yaml"
                .parse::<Format>()
                .unwrap_err()
                .contains("not raw, json")
        );
    }

    #[test]
    fn json_uses_base64_for_bytes_that_are_not_utf8() {
        let out = render("json", &RECORD);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["topic"], "orders");
        assert_eq!(value["partition"], 2);
        assert_eq!(value["offset"], 41);
        assert_eq!(value["key"], "k1");
        assert_eq!(value["key_encoding"], "utf8");
        assert_eq!(value["value"], "dv8=");
        assert_eq!(value["value_encoding"], "base64");
        assert_eq!(out.last(), Some(&b'\n'));
    }
}
