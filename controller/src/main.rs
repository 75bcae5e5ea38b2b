//! `booking-controller`: reconciles Resources, ResourceMonitors, Bookings and BookingSchedulers
//! against AWS EC2 and RDS.

use clap::Parser;

/// Starts and stops tagged EC2 and RDS instance groups for the time slots users book.
#[derive(Parser, Debug)]
#[command(name = "booking-controller", version, about)]
struct Args {
    /// Namespace to watch; all namespaces when empty.
    #[arg(long, env = "NAMESPACE", default_value = "")]
    namespace: String,
    /// Prefix of the AWS tag keys (`<prefix>managed`, `<prefix>application`, …).
    #[arg(long, env = "TAG_PREFIX", default_value = "resource-booking/")]
    tag_prefix: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::bail!(
        "booking-controller {} (namespace {:?}, tag prefix {:?}): the reconcilers are not part of this build yet",
        env!("CARGO_PKG_VERSION"),
        args.namespace,
        args.tag_prefix
    )
}
