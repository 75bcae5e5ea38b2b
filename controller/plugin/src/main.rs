//! `kubectl-booking`: parses the command line and runs it; errors go to stderr as
//! `error: …` with kubectl's exit codes.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = kubectl_booking::cli::Cli::parse();
    let mut out = std::io::stdout().lock();
    match kubectl_booking::run(cli, &mut out).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
