//! `booking-webhook`: the validating and mutating admission webhook for the booking API.

use clap::Parser;

/// Rejects overlapping or malformed bookings at admission time and fills defaults.
#[derive(Parser, Debug)]
#[command(name = "booking-webhook", version, about)]
struct Args {
    /// PEM certificate chain served on the HTTPS port.
    #[arg(long, env = "TLS_CERT_FILE")]
    tls_cert_file: Option<std::path::PathBuf>,
    /// PEM private key of the certificate.
    #[arg(long, env = "TLS_KEY_FILE")]
    tls_key_file: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::bail!(
        "booking-webhook {} (certificate {:?}): the admission server is not part of this build yet",
        env!("CARGO_PKG_VERSION"),
        args.tls_cert_file
    )
}
