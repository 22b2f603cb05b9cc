//! The `pagurus` binary: see `pagurus --help`.

fn main() -> std::process::ExitCode {
    pagurus::cli::main()
}
