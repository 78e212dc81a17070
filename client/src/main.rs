//! `redlock`: take, release, extend, check and inspect quorum locks, and
//! run a command while holding one (`exec`). See `redlock --help` and
//! client/README.md; the code is in `cli/`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
