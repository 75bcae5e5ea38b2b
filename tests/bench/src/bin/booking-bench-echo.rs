//! `booking-bench-echo --cert FILE --key FILE --listen ADDR`: the bare hyper + rustls server
//! answering a fixed AdmissionReview (see `booking_bench::echo`). Prints `listening on ADDR`.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use clap::Parser;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};

/// The bare TLS echo server of the benchmarks.
#[derive(Parser, Debug)]
struct Args {
    /// PEM certificate chain.
    #[arg(long)]
    cert: PathBuf,
    /// PEM private key.
    #[arg(long)]
    key: PathBuf,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:9443")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let chain = CertificateDer::pem_file_iter(&args.cert)
        .with_context(|| format!("reading {}", args.cert.display()))?
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&args.key)
        .with_context(|| format!("reading {}", args.key.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    booking_bench::echo::serve(
        listener,
        Arc::new(config),
        booking_bench::fixtures::echo_answer().into(),
    )
    .await;
    Ok(())
}
