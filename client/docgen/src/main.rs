//! `redlock-docgen DIR`: writes the `redlock` CLI's man pages (DIR/man:
//! redlock.1 and one page per subcommand, redlock-acquire.1, ...) and its
//! shell completions (DIR/completions: bash, zsh, fish) from the CLI's own
//! clap definition, client/src/cli/args.rs, compiled in here as it is, so
//! that they cannot drift from the CLI. scripts/release runs it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

#[allow(dead_code)]
#[path = "../../src/cli/args.rs"]
mod args;

fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let man = dir.join("man");
    std::fs::create_dir_all(&man)?;
    clap_mangen::generate_to(args::Cli::command(), &man)?;
    for entry in std::fs::read_dir(&man)? {
        written.push(entry?.path());
    }
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut command = args::Cli::command();
        written.push(clap_complete::generate_to(shell, &mut command, "redlock", &completions)?);
    }
    written.sort();
    Ok(written)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let [dir] = argv.as_slice() else {
        eprintln!("usage: redlock-docgen DIR   (writes DIR/man/*.1 and DIR/completions/*)");
        return ExitCode::from(2);
    };
    match write_all(Path::new(dir)) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("redlock-docgen: cannot write under {dir}: {e}");
            ExitCode::FAILURE
        }
    }
}
