//! The `actionledger` binary: parses the command line and hands it to the library.

use actionledger::cli::{Cli, run};
use actionledger::error::exit;
use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Panics and unexpected failures get a readable report instead of a bare message.
    actionledger::cli::install_panic_report();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return code(exit::ERROR);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(status) => code(status),
        Err(error) => {
            eprintln!("error: {error}");
            code(error.exit_code())
        }
    }
}

fn code(status: i32) -> ExitCode {
    ExitCode::from(u8::try_from(status).unwrap_or(1))
}
