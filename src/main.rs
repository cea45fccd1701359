//! The `mom-router` binary: parses the command line and hands over to [`mom_router::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    mom_router::cli::main()
}
