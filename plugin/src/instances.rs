//! `instances`, `manage`, `tag`: the machines and their booking tags, over the controller's
//! AWS layer.

use std::io::Write;

use crate::cli::{Global, InstancesArgs, ManageArgs, TagArgs};
use crate::error::{Error, Result};

/// `instances`.
pub async fn instances(
    _global: &Global,
    _args: &InstancesArgs,
    _out: &mut dyn Write,
) -> Result<()> {
    Err(Error::Usage("instances: not built yet".into()))
}

/// `manage`.
pub async fn manage(_global: &Global, _args: &ManageArgs, _out: &mut dyn Write) -> Result<()> {
    Err(Error::Usage("manage: not built yet".into()))
}

/// `tag`.
pub async fn tag(_global: &Global, _args: &TagArgs, _out: &mut dyn Write) -> Result<()> {
    Err(Error::Usage("tag: not built yet".into()))
}
