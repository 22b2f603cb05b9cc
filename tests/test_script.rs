//! scripts/test.sh: `--help` explains it without running anything, a FILTER runs only the
//! matching tests (cargo test's filter) and skips the format and lint checks, and every run
//! ends with the summary line. `cargo` is a stand-in on PATH that records its arguments and
//! prints one test result: a real nested `cargo test` would wait for this one's lock on the
//! build directory. And the README's first command picks the broker among the binaries.

use std::process::{Command, Output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test.sh");

/// Runs scripts/test.sh with `args`, a fake `cargo` first on PATH. Returns its output and
/// the cargo command lines it ran, one per call.
fn run(args: &[&str]) -> (Output, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    let cargo = dir.path().join("cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\n[ \"$1\" = test ] && echo 'test result: ok. 3 passed; 0 failed; 0 ignored'\nexit 0\n",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(SCRIPT)
        .args(args)
        .env("PATH", path)
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(&calls).unwrap_or_default();
    (out, calls.lines().map(str::to_string).collect())
}

fn last_line(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap_or_default().to_string()
}

#[test]
fn help_explains_and_runs_nothing() {
    for flag in ["--help", "-h"] {
        let (out, calls) = run(&[flag]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("Usage: scripts/test.sh [FILTER]"),
            "{text}"
        );
        for prerequisite in ["kcat", "confluent-kafka", "kafka-python", "fuse3", "strace"] {
            assert!(text.contains(prerequisite), "{prerequisite}: {text}");
        }
        assert!(calls.is_empty(), "{flag} ran cargo: {calls:?}");
    }
}

#[test]
fn a_filter_runs_only_matching_tests_without_lints() {
    let (out, calls) = run(&["log_level", "--", "--nocapture"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls,
        ["test --release --all-targets log_level -- --nocapture"],
        "{out:?}"
    );
    assert_eq!(last_line(&out), "tests: 3 passed, 0 failed");
}

#[test]
fn without_arguments_it_runs_the_whole_suite() {
    let (out, calls) = run(&[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls,
        [
            "fmt --check",
            "clippy --all-targets --release -- -D warnings",
            "test --release --all-targets",
        ]
    );
    assert_eq!(last_line(&out), "tests: 3 passed, 0 failed");
}

#[test]
fn bad_arguments_are_refused() {
    for args in [&["--verbose"][..], &["one", "two"]] {
        let (out, calls) = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(calls.is_empty(), "{args:?} ran cargo: {calls:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("see --help"),
            "{out:?}"
        );
    }
}

/// The README's first command, `cargo run --release -- serve`, must pick the broker: cargo
/// refuses to guess among several binaries (the test-only `powerfs` is one) unless the
/// package names a `default-run`. (`.ci/run` runs the command itself, through
/// scripts/readme-serve.sh: a `cargo run` inside `cargo test` would wait for this run's
/// lock on the build directory.)
#[test]
fn the_readme_first_command_runs_the_broker() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let first = readme
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .nth(1)
        .unwrap();
    assert_eq!(first, "cargo run --release -- serve");
    let script = std::fs::read_to_string(format!("{root}/scripts/readme-serve.sh")).unwrap();
    assert!(
        script.contains(&format!("  {first} >")),
        "readme-serve.sh runs {first:?}"
    );
    let ci = std::fs::read_to_string(format!("{root}/.ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l == "scripts/readme-serve.sh"),
        ".ci/run"
    );

    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = &metadata["packages"][0];
    let bins: Vec<&str> = package["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    if bins.len() > 1 {
        assert_eq!(package["default_run"], "pagurus", "binaries {bins:?}");
    }
}
