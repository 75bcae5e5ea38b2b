//! `booking-webhook`: the validating and mutating admission webhook for the booking API.

use booking_webhook::config::Args;
use clap::Parser;
use tracing_subscriber::{EnvFilter, fmt};

// jemalloc, which returns freed memory to the kernel (see booking_shared::heap).
booking_shared::global_allocator!();

fn main() {
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .expect("no other rustls crypto provider is installed before main");
    let args = Args::parse();
    fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(booking_webhook::run(args)));
    booking_shared::ops::exit_with(result)
}
