//! `status`, `timeline`, `book`, `extend`, `release`: the Bookings of Resources.

use std::io::Write;

use crate::cli::{BookArgs, ExtendArgs, Global, ReleaseArgs, StatusArgs, TimelineArgs};
use crate::error::{Error, Result};
use crate::kubeconn::Conn;

/// `status`.
pub async fn status(
    _conn: &Conn,
    _global: &Global,
    _args: &StatusArgs,
    _out: &mut dyn Write,
) -> Result<()> {
    Err(Error::Usage("status: not built yet".into()))
}

/// `timeline`.
pub async fn timeline(
    _conn: &Conn,
    _global: &Global,
    _args: &TimelineArgs,
    _out: &mut dyn Write,
) -> Result<()> {
    Err(Error::Usage("timeline: not built yet".into()))
}

/// `book`.
pub async fn book(
    _conn: &Conn,
    _global: &Global,
    _args: &BookArgs,
    _out: &mut dyn Write,
) -> Result<()> {
    Err(Error::Usage("book: not built yet".into()))
}

/// `extend`.
pub async fn extend(
    _conn: &Conn,
    _global: &Global,
    _args: &ExtendArgs,
    _out: &mut dyn Write,
) -> Result<()> {
    Err(Error::Usage("extend: not built yet".into()))
}

/// `release`.
pub async fn release(
    _conn: &Conn,
    _global: &Global,
    _args: &ReleaseArgs,
    _out: &mut dyn Write,
) -> Result<()> {
    Err(Error::Usage("release: not built yet".into()))
}
