//! `kubectl booking`, the booking operator's kubectl plugin.
//!
//! kubectl runs any `kubectl-booking` on `PATH` as `kubectl booking …` (kubectl's plugin
//! mechanism), so this is one binary following kubectl's conventions: its global flags, `-o`,
//! exit codes, help with examples and shell completion ([`cli`]). The AWS commands
//! ([`instances`]) use the controller's own AWS layer and tag keys; the booking commands
//! ([`bookings`]) use the shared API types and time rules, and let the admission webhook
//! decide what may be booked.

pub mod bookings;
pub mod cli;
pub mod error;
pub mod instances;
pub mod kubeconn;
pub mod output;
pub mod status;
pub mod timeline;
pub mod when;

use std::io::Write;

use clap::CommandFactory;

use cli::{Cli, Command};
use error::Result;

/// Runs one command, writing its output to `out`.
pub async fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    let global = &cli.global;
    match &cli.command {
        Command::Completion(args) => {
            let mut cmd = Cli::command();
            clap_complete::generate(args.shell, &mut cmd, "kubectl-booking", out);
            Ok(())
        }
        Command::Instances(args) => instances::instances(global, args, out).await,
        Command::Manage(args) => instances::manage(global, args, out).await,
        Command::Tag(args) => instances::tag(global, args, out).await,
        Command::Status(args) => {
            let conn = kubeconn::Conn::new(global).await?;
            bookings::status(&conn, global, args, out).await
        }
        Command::Timeline(args) => {
            let conn = kubeconn::Conn::new(global).await?;
            bookings::timeline(&conn, global, args, out).await
        }
        Command::Book(args) => {
            let conn = kubeconn::Conn::new(global).await?;
            bookings::book(&conn, global, args, out).await
        }
        Command::Extend(args) => {
            let conn = kubeconn::Conn::new(global).await?;
            bookings::extend(&conn, global, args, out).await
        }
        Command::Release(args) => {
            let conn = kubeconn::Conn::new(global).await?;
            bookings::release(&conn, global, args, out).await
        }
    }
}
