//! `booking-controller`: reconciles Resources, ResourceMonitors and Bookings against AWS EC2 and
//! RDS. Thin: crypto provider, arguments, logging, then [`booking_controller::run::run`].

use clap::Parser;
use tracing_subscriber::EnvFilter;

use booking_controller::config::Args;

// jemalloc, which returns freed memory to the kernel (see booking_shared::heap).
booking_shared::global_allocator!();

fn main() {
    // A worker gives its allocator cache back when it goes idle (see
    // booking_shared::heap::release_thread_cache_when_idle).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(booking_shared::heap::release_thread_cache_when_idle)
        .build()
        .expect("the Tokio runtime starts");
    runtime.block_on(controller());
}

async fn controller() {
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .expect("no other rustls crypto provider is installed before main");
    let args = Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if args.ops.log_json {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .json()
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    booking_shared::ops::exit_with(booking_controller::run::run(args).await)
}
