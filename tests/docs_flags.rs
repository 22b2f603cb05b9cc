//! The documentation's flag tables match the flags the binary has: for every subcommand
//! (found in `--help`, so a new one needs a table too), each flag in its `--help` is in its
//! table with the same environment variable and default, and each flag in the table is in
//! `--help`. And every `pagurus ...` command line in README.md, deploy/TUNING.md and
//! docs/*.md parses with the real clap definition, so a doc cannot name a flag or subcommand
//! that does not exist.
//!
//! A table follows a marker line `<!-- flags: SUBCOMMAND -->` in docs/*.md; its rows are
//! `| --flag | ENV | default | meaning |` (backquotes allowed, `—` for none). Flags every
//! subcommand takes (`--log-level`, ...) are in the `global` table only, and the connection
//! flags every client subcommand shares (`--broker`, `--user`, `--tls-ca`, ...) in the
//! `connection` table only.

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
        // A name is indented by two spaces; a description wrapped to the terminal's width
        // continues further in.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
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
        let indent = line.len() - trimmed.len();
        let indented = indent > 0;
        // A flag starts 2 (`-p, --partitions`) or 6 (`--quiet`) columns in; a description
        // wrapped to the terminal's width continues further in, and may start with a flag
        // it names.
        let long = trimmed
            .strip_prefix('-')
            .filter(|_| (2..=6).contains(&indent))
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

/// The rows of every flag table for `name` (after `<!-- flags: NAME -->`), by doc.
fn doc_tables(name: &str) -> Vec<(&'static str, Vec<String>)> {
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
        found.push((*doc, rows));
    }
    found
}

/// The flag table after `<!-- flags: NAME -->`, from whichever doc has it.
fn doc_table(name: &str) -> BTreeMap<String, Flag> {
    let mut found = doc_tables(name);
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
    let connection = doc_table("connection");
    assert!(connection.contains_key("--broker") && connection.contains_key("--tls-ca"));
    let mut connection_seen = std::collections::BTreeSet::new();
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
        // A client subcommand (one with --broker) has every connection flag.
        if flags.contains_key("--broker") {
            for (flag, spec) in &connection {
                match flags.remove(flag) {
                    Some(got) if got == *spec => {}
                    got => problems.push(format!(
                        "`{name}`: connection flag {flag} is {got:?}, documented as {spec:?}"
                    )),
                }
                connection_seen.insert(flag.clone());
            }
        }
        if flags.is_empty() {
            // Only the global flags: a sentence says so; an empty table reads as missing.
            let tables = doc_tables(&name);
            if !tables.is_empty() {
                problems.push(format!(
                    "`{name}` has no flags of its own, but {:?} has an (empty) table for it",
                    tables[0].0
                ));
            }
            continue;
        }
        problems.extend(compare(&name, &flags, &doc_table(&name)));
    }
    for flag in connection.keys().filter(|f| !connection_seen.contains(*f)) {
        problems.push(format!(
            "`connection`: {flag} is documented but no subcommand has it"
        ));
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
    // Wrapped to the terminal: a continuation that starts with a flag it names.
    let wrapped = help_flags(
        "Options:
      --topics <TOPICS>
          Topics (see
          --keep-topics) [env:
          PAGURUS_T=] [default: 1]
",
    );
    assert_eq!(
        wrapped,
        BTreeMap::from([(
            "--topics".to_string(),
            Flag {
                env: Some("PAGURUS_T".into()),
                default: Some("1".into())
            }
        )])
    );
    assert_eq!(
        long["--quiet"],
        Flag {
            env: None,
            default: None
        }
    );
}

/// The Markdown files whose `pagurus ...` command lines must parse.
fn command_docs() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md"), root.join("deploy/TUNING.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs.sort();
    docs
}

/// One `pagurus` command line of a doc: its line, its arguments, and whether it must parse
/// whole (a shell block's command) or only name real subcommands and flags (inline code and
/// comments, which cut commands short and hold placeholders: `--partition P`).
#[derive(Debug)]
struct DocCommand {
    line: usize,
    args: Vec<String>,
    whole: bool,
}

/// Shell words and operators of `code`: quotes group, `# ...` at a word's start ends the
/// line, `|;&()<>` separate commands (`None`), `$(` and `<(` open one.
fn shell_words(code: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = code.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let quoted: String = chars.by_ref().take_while(|&q| q != c).collect();
                word.get_or_insert_with(String::new).push_str(&quoted);
            }
            '#' if word.is_none() => break,
            '|' | ';' | '&' | '(' | ')' | '<' | '>' => {
                // `$(`: the `$` opens a command substitution, it is no word.
                out.extend(word.take().filter(|w| w != "$").map(Some));
                out.push(None);
            }
            c if c.is_whitespace() => out.extend(word.take().map(Some)),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word.map(Some));
    out
}

/// The arguments of every `pagurus ...` (or `cargo run ... -- ...`) command in `code`.
fn pagurus_commands(code: &str) -> Vec<Vec<String>> {
    let words = shell_words(code);
    let mut found = Vec::new();
    for command in words.split(Option::is_none) {
        let mut words = command
            .iter()
            .flatten()
            .map(String::as_str)
            .skip_while(|w| {
                let assignment = w.split_once('=').is_some_and(|(name, _)| {
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                assignment || matches!(*w, "sudo" | "env" | "exec" | "time")
            })
            .peekable();
        let is_pagurus = match words.next() {
            Some(w) if w == "pagurus" || w.ends_with("/pagurus") => true,
            Some("cargo") if words.peek() == Some(&"run") => {
                words.by_ref().any(|w| w == "--");
                true
            }
            _ => false,
        };
        let args: Vec<String> = words
            .filter(|w| *w != "...")
            .map(|w| w.trim_matches(['[', ']']).to_string())
            .filter(|w| !w.is_empty())
            .collect();
        if is_pagurus && !args.is_empty() {
            found.push(args);
        }
    }
    found
}

/// Every `pagurus` command of a Markdown text: shell blocks (```sh and unlabelled), comments
/// of other blocks (a TOML comment can show a command too), and inline code.
fn doc_commands(text: &str) -> Vec<DocCommand> {
    let mut found = Vec::new();
    let mut fence: Option<String> = None;
    let mut pending = String::new();
    let mut add = |line: usize, code: &str, whole: bool| {
        for args in pagurus_commands(code) {
            found.push(DocCommand { line, args, whole });
        }
    };
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(lang.trim().to_string()),
            };
            continue;
        }
        match fence.as_deref() {
            Some("" | "sh" | "bash" | "shell" | "console") => {
                // A `\` at the end continues the command on the next line.
                if let Some(head) = line.strip_suffix('\\') {
                    pending.push_str(head);
                    pending.push(' ');
                    continue;
                }
                let full = std::mem::take(&mut pending) + line;
                add(number, &full, true);
                // The comment's words are prose: `# like pagurus topics list`.
                if let Some((_, comment)) = full.split_once(" #") {
                    add(number, comment, false);
                }
            }
            Some(_) => {
                if let Some((_, comment)) = line.split_once('#') {
                    add(number, comment, false);
                }
            }
            None => {
                for span in line.split('`').skip(1).step_by(2) {
                    add(number, span, false);
                }
            }
        }
    }
    found
}

/// Why clap refuses a doc's command, if it does: any refusal for a shell block's command; for
/// inline code and comments only a subcommand or flag that does not exist.
fn refusal(command: &DocCommand) -> Option<String> {
    use clap::CommandFactory;
    use clap::error::ErrorKind;
    let argv = std::iter::once("pagurus").chain(command.args.iter().map(String::as_str));
    let error = pagurus::cli::Cli::command()
        .try_get_matches_from(argv)
        .err()?;
    let fatal = match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => false,
        ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand => true,
        _ => command.whole,
    };
    fatal.then(|| error.render().to_string())
}

#[test]
fn every_pagurus_command_in_the_docs_parses() {
    let mut problems = Vec::new();
    let mut whole = 0;
    for doc in command_docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for command in doc_commands(&text) {
            whole += usize::from(command.whole);
            if let Some(why) = refusal(&command) {
                problems.push(format!(
                    "{}:{}: pagurus {}\n{why}",
                    doc.display(),
                    command.line,
                    command.args.join(" ")
                ));
            }
        }
    }
    // The README alone has more than ten; finding few means the extraction broke.
    assert!(whole >= 30, "only {whole} commands found in shell blocks");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn doc_command_extraction_finds_what_clap_refuses() {
    let doc = "\
```toml
[profile.staging]   # pagurus --profile staging ... (or PAGURUS_PROFILE=staging)
```

```sh
pagurus serve --data /var/lib/pagurus          # listens on 127.0.0.1:9092
printf 'a\\n' | PAGURUS_BROKER=h:1 pagurus produce --topic t \\
  --bogus 1
source <(pagurus completion bash) && journalctl -u pagurus -f
cargo run --release -- serve --no-such-flag
pagurus consume --topic orders --format '%p|%o #x'
```

Run `pagurus topics compact T [--partition P]` or `pagurus consume --group`.
";
    let commands = doc_commands(doc);
    let refused: Vec<(usize, String)> = commands
        .iter()
        .filter(|c| refusal(c).is_some())
        .map(|c| (c.line, c.args.join(" ")))
        .collect();
    assert_eq!(
        refused,
        [
            (2, "--profile staging".to_string()),
            (6, "serve --data /var/lib/pagurus".to_string()),
            (8, "produce --topic t --bogus 1".to_string()),
            (10, "serve --no-such-flag".to_string()),
        ],
        "{commands:#?}"
    );
    let args: Vec<String> = commands.iter().map(|c| c.args.join(" ")).collect();
    assert!(args.contains(&"completion bash".to_string()), "{args:?}");
    assert!(
        args.contains(&"consume --topic orders --format %p|%o #x".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"topics compact T --partition P".to_string()),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a.starts_with("-f")), "{args:?}");
}
