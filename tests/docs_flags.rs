//! The documentation's flag tables match the flags the binary has: for every subcommand
//! (found in `--help`, so a new one needs a table too), each flag in its `--help` is in its
//! table with the same environment variable and default, and each flag in the table is in
//! `--help`.
//!
//! A table follows a marker line `<!-- flags: SUBCOMMAND -->` in docs/*.md; its rows are
//! `| --flag | ENV | default | meaning |` (backquotes allowed, `—` for none). Flags every
//! subcommand takes (`--log-level`, ...) are in the `global` table only.

use std::collections::BTreeMap;
use std::process::Command;

const DOCS: &[&str] = &["docs/OPERATIONS.md", "docs/CLI.md"];

#[derive(Debug, Clone, PartialEq, Eq)]
struct Flag {
    env: Option<String>,
    default: Option<String>,
}

/// `--help` of `pagurus ARGS`, without any `PAGURUS_*` variable of this environment (clap
/// shows their values).
fn help(args: &[&str]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagurus"));
    command.args(args).arg("--help");
    for (key, _) in std::env::vars() {
        if key.starts_with("PAGURUS_") {
            command.env_remove(key);
        }
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "pagurus {args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// Every leaf subcommand, as argument paths (`["topics", "create"]`), from the `Commands:`
/// sections of `--help`.
fn subcommands(path: &[&str]) -> Vec<Vec<String>> {
    let text = help(path);
    let names: Vec<String> = text
        .lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect();
    if names.is_empty() {
        return vec![path.iter().map(|s| s.to_string()).collect()];
    }
    names
        .iter()
        .flat_map(|name| {
            let mut sub: Vec<&str> = path.to_vec();
            sub.push(name);
            subcommands(&sub)
        })
        .collect()
}

/// Long flags in clap's help text (short or long form), with their env var and default.
fn help_flags(text: &str) -> BTreeMap<String, Flag> {
    let mut flags = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    let mut finish = |current: Option<(String, String)>| {
        if let Some((name, block)) = current {
            let field = |tag: &str| {
                let start = block.find(tag)? + tag.len();
                let end = start + block[start..].find(']')?;
                Some(block[start..end].to_string())
            };
            let env = field("[env: ").map(|e| e.trim_end_matches('=').to_string());
            flags.insert(
                name,
                Flag {
                    env,
                    default: field("[default: "),
                },
            );
        }
    };
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indented = line.len() > trimmed.len();
        let long = trimmed
            .strip_prefix('-')
            .filter(|_| indented)
            .map(|rest| rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric()))
            .map(|rest| rest.trim_start_matches(", -"))
            .and_then(|rest| rest.strip_prefix('-'));
        match long {
            Some(rest) if !rest.is_empty() => {
                finish(current.take());
                let name = rest.split([' ', '\t']).next().unwrap();
                current = Some((format!("--{name}"), trimmed.to_string()));
            }
            // A section header ends a flag; blank lines separate its paragraphs.
            _ if !indented && !trimmed.is_empty() => finish(current.take()),
            _ => {
                if let Some((_, block)) = current.as_mut() {
                    block.push(' ');
                    block.push_str(trimmed);
                }
            }
        }
    }
    finish(current);
    flags.remove("--help");
    flags.remove("--version");
    flags
}

/// The flag table after `<!-- flags: NAME -->`, from whichever doc has it.
fn doc_table(name: &str) -> BTreeMap<String, Flag> {
    let marker = format!("<!-- flags: {name} -->");
    let mut found = Vec::new();
    for doc in DOCS {
        let path = format!("{}/{doc}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines = text.lines().skip_while(|l| l.trim() != marker);
        if lines.next().is_none() {
            continue;
        }
        let rows: Vec<String> = lines
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .map(str::to_string)
            .collect();
        found.push((doc, rows));
    }
    assert_eq!(
        found.len(),
        1,
        "exactly one flag table for `{name}` expected in {DOCS:?}, found {}",
        found.len()
    );
    let (doc, rows) = found.pop().unwrap();
    let mut table = BTreeMap::new();
    // Skip the header and the |---| line.
    for row in rows.iter().skip(2) {
        let cells: Vec<&str> = row
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`'))
            .collect();
        assert!(cells.len() >= 4, "{doc}: short row {row:?}");
        let none = |c: &str| (!c.is_empty() && c != "—").then(|| c.to_string());
        let flag = cells[0].split_whitespace().next().unwrap_or("").to_string();
        assert!(flag.starts_with("--"), "{doc}: row without a flag: {row:?}");
        let previous = table.insert(
            flag.clone(),
            Flag {
                env: none(cells[1]),
                default: none(cells[2]),
            },
        );
        assert!(previous.is_none(), "{doc}: {flag} twice in `{name}`");
    }
    table
}

fn compare(name: &str, help: &BTreeMap<String, Flag>, doc: &BTreeMap<String, Flag>) -> Vec<String> {
    let mut problems = Vec::new();
    for (flag, want) in help {
        match doc.get(flag) {
            None => problems.push(format!("`{name}`: {flag} is not documented ({want:?})")),
            Some(got) if got != want => problems.push(format!(
                "`{name}`: {flag} documented as {got:?}, the binary says {want:?}"
            )),
            Some(_) => {}
        }
    }
    for flag in doc.keys().filter(|f| !help.contains_key(*f)) {
        problems.push(format!("`{name}`: {flag} is documented but does not exist"));
    }
    problems
}

#[test]
fn docs_flag_tables_match_help() {
    let global = help_flags(&help(&[]));
    assert!(global.contains_key("--log-level") && global.contains_key("--log-format"));
    let mut problems = compare("global", &global, &doc_table("global"));
    let all = subcommands(&[]);
    assert!(all.len() >= 10, "subcommands found: {all:?}");
    for args in &all {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let name = args.join(" ");
        let mut flags = help_flags(&help(&args));
        assert!(!flags.is_empty(), "no flags parsed for {name}");
        for (flag, spec) in &global {
            assert_eq!(flags.remove(flag).as_ref(), Some(spec), "{name}: {flag}");
        }
        problems.extend(compare(&name, &flags, &doc_table(&name)));
    }
    assert!(
        problems.is_empty(),
        "docs out of date:\n{}",
        problems.join("\n")
    );
}

#[test]
fn help_parser_reads_short_and_long_layouts() {
    let short = "Options:\n      --data-dir <DIR>  Where [env: PAGURUS_DATA_DIR=] [default: ./d]\n  -h, --help        Print help\n";
    let long = "Options:\n  -p, --partitions <N>\n          Partitions\n          \n          [default: 1]\n\n      --quiet\n          No bar\n";
    let short = help_flags(short);
    assert_eq!(
        short["--data-dir"],
        Flag {
            env: Some("PAGURUS_DATA_DIR".into()),
            default: Some("./d".into())
        }
    );
    assert_eq!(short.len(), 1);
    let long = help_flags(long);
    assert_eq!(long["--partitions"].default.as_deref(), Some("1"));
    assert_eq!(
        long["--quiet"],
        Flag {
            env: None,
            default: None
        }
    );
}
