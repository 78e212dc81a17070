//! The `redlock` command line, over the `redlock_client` library: the
//! flags and help (`args`), one run (`run`), taking the lock (`take`),
//! `exec` (`exec`), what is printed (`output`) and the exit codes
//! (`exit`).

mod args;
mod exec;
mod exit;
mod output;
mod run;
mod take;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

/// Parses the command line (clap exits 2 on a usage error, 0 for
/// `--help`), runs it, and exits with the code of how it ended.
pub fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redlock: cannot start the async runtime: {e}");
            return ExitCode::from(exit::INTERNAL);
        }
    };
    let code = runtime.block_on(run::run(cli));
    // Do not wait for background tasks (a node that does not answer).
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}
