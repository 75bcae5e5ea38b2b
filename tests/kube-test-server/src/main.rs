//! `kube-test-server`: the in-memory Kubernetes API server as a process (for the sandbox and for
//! tests that drive other processes). Prints a readiness line and runs until SIGINT/SIGTERM.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kube_test_server::{Options, TestServer, TokenUser};

/// Command-line flags (each also readable from the environment).
#[derive(Debug, Parser)]
#[command(
    name = "kube-test-server",
    about = "In-memory Kubernetes API server for tests and the sandbox"
)]
struct Args {
    /// Port on 127.0.0.1 (0 = any free port).
    #[arg(long, env = "KTS_PORT", default_value_t = 0)]
    port: u16,
    /// Serve HTTPS with a CA generated at start.
    #[arg(long, env = "KTS_HTTPS")]
    https: bool,
    /// Where to write the kubeconfig.
    #[arg(long, env = "KTS_KUBECONFIG_OUT")]
    kubeconfig_out: Option<PathBuf>,
    /// A bearer token: `TOKEN=user:group1,group2` (repeatable; the first user is the current
    /// context). Default: `admin-token=admin:system:masters`.
    #[arg(long = "token", env = "KTS_TOKENS", value_delimiter = ';')]
    tokens: Vec<String>,
    /// Where a webhook service is reached: `namespace/name=https://127.0.0.1:8443` (repeatable).
    #[arg(
        long = "service-endpoint",
        env = "KTS_SERVICE_ENDPOINTS",
        value_delimiter = ';'
    )]
    service_endpoints: Vec<String>,
    /// Seconds between watch bookmarks.
    #[arg(long, env = "KTS_BOOKMARK_SECONDS", default_value_t = 5)]
    bookmark_seconds: u64,
}

fn parse_endpoints(items: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| {
                    anyhow::anyhow!("--service-endpoint {s:?} is not namespace/name=URL")
                })
        })
        .collect()
}

async fn run(args: Args) -> anyhow::Result<()> {
    let users = if args.tokens.is_empty() {
        Options::default().users
    } else {
        args.tokens
            .iter()
            .map(|t| TokenUser::parse(t))
            .collect::<Result<Vec<_>, _>>()?
    };
    let options = Options {
        port: args.port,
        https: args.https,
        users,
        kubeconfig_out: args.kubeconfig_out,
        bookmark_interval: Duration::from_secs(args.bookmark_seconds.max(1)),
        service_endpoints: parse_endpoints(&args.service_endpoints)?,
        ..Options::default()
    };
    let server = TestServer::start(options).await?;
    println!(
        "kube-test-server ready at {} (kubeconfig {})",
        server.url(),
        server.kubeconfig_path().display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    run(Args::parse()).await
}
