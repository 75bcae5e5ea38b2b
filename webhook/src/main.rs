//! `booking-webhook`: the validating and mutating admission webhook for the booking API.

use booking_webhook::config::Args;
use clap::Parser;
use tracing_subscriber::{EnvFilter, fmt};

// jemalloc, which returns freed memory to the kernel (see booking_shared::heap).
booking_shared::global_allocator!();

fn main() -> anyhow::Result<()> {
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("another rustls crypto provider is already installed"))?;
    let args = Args::parse();
    fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(booking_webhook::run(args))
}
