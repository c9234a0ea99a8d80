//! `completions` and `manpage`: shell completion scripts and the manual page, generated from the
//! command line's own definition, so they list exactly the commands, flags and values it takes.

use super::Cli;
use crate::error::{Error, exit};
use clap::CommandFactory as _;
use std::io::Write as _;

/// Prints the completion script for `shell`.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<i32, Error> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "actionledger", &mut script);
    print(&script, "cannot write the completion script")
}

/// Prints the manual page (roff, for `man -l -` or a file under `man1/`).
pub(super) fn manpage() -> Result<i32, Error> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|e| Error::io("cannot render the manual page", e))?;
    print(&page, "cannot write the manual page")
}

/// Writes the whole text to standard output. A reader that closed it early (`| head`) is no error,
/// as for every other command.
fn print(text: &[u8], what: &str) -> Result<i32, Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => Ok(exit::OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(e) => Err(Error::io(what, e)),
    }
}
