//! Test doubles shared by the AWS layer's unit tests.

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{AwsResult, Page, RdsApi};

/// An RDS with no DB instances or clusters that accepts every call.
pub struct NoRds;

impl RdsApi for NoRds {
    fn describe_db_instances<'a>(
        &'a self,
        _: &'a str,
        _: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        async { Ok((vec![], None)) }.boxed()
    }
    fn describe_db_clusters<'a>(
        &'a self,
        _: &'a str,
        _: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        async { Ok((vec![], None)) }.boxed()
    }
    fn start_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async { Ok(()) }.boxed()
    }
    fn stop_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async { Ok(()) }.boxed()
    }
    fn start_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async { Ok(()) }.boxed()
    }
    fn stop_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async { Ok(()) }.boxed()
    }
    fn add_tags<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async { Ok(()) }.boxed()
    }
    fn remove_tags<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async { Ok(()) }.boxed()
    }
}
