//! The `actionledger` binary: parses the command line and hands it to the library.

use actionledger::cli::{Cli, error_json, error_text, json_requested, run};
use actionledger::error::exit;
use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Panics and unexpected failures get a readable report instead of a bare message.
    actionledger::cli::install_panic_report();
    quiet_on_closed_output();
    let mut cli = match Cli::try_parse().map(Cli::with_json_given_anywhere) {
        Ok(Ok(cli)) => cli,
        Ok(Err(refused)) => return failed(true, &refused.to_string(), exit::USAGE),
        Err(refused) => return usage_error(&refused),
    };
    let json = cli.command.json();
    if !cli.command.draws_on_terminal()
        && let Err(error) = actionledger::cli::logging::init(cli.log_format)
    {
        return failed(json, &error_text(&error), error.exit_code());
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return failed(json, &format!("cannot start the async runtime: {e}"), exit::ERROR),
    };
    match runtime.block_on(run(cli)) {
        Ok(status) => code(status),
        Err(error) => failed(json, &error_text(&error), error.exit_code()),
    }
}

/// Reports an error: under `--json` as one JSON object on standard output, where a script reads
/// the command's answer; otherwise as a line on standard error.
fn failed(json: bool, message: &str, status: i32) -> ExitCode {
    if json {
        println!("{}", error_json(message, status));
    } else {
        eprintln!("error: {message}");
    }
    code(status)
}

/// A command line clap refused (exit 2, with clap's suggestion for a mistyped value), or asked for
/// `--help` or `--version`, which clap prints as usual. A refused line that asked for `--json` gets
/// its error as JSON, as any other error.
fn usage_error(refused: &clap::Error) -> ExitCode {
    if refused.use_stderr() && json_requested(std::env::args_os()) {
        let text = refused.render().to_string();
        let message = text.trim().strip_prefix("error: ").unwrap_or(text.trim());
        return failed(true, message, refused.exit_code());
    }
    refused.exit()
}

/// A reader that stops early (`show KEY | head -1`, a pager quit before the end) closes standard
/// output; the next `print!` then fails with a broken pipe, which the standard library reports as
/// a panic. Nothing went wrong for the person who closed it: the command ends quietly with exit
/// 0, as `cat` does, instead of a backtrace and exit 101. Every other panic keeps its report.
fn quiet_on_closed_output() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}

fn code(status: i32) -> ExitCode {
    ExitCode::from(u8::try_from(status).unwrap_or(1))
}
