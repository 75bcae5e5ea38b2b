//! The Kubernetes connection as kubectl makes it: `--kubeconfig` (or `$KUBECONFIG`, else
//! `~/.kube/config`, else the in-cluster service account), `--context`, and the namespace from
//! `-n`, else the context's, else `default`.

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::Global;
use crate::error::{Error, Result};

/// A client and the namespace the request is scoped to.
pub struct Conn {
    /// The client.
    pub client: kube::Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
    /// `-A`.
    pub all_namespaces: bool,
}

impl Conn {
    /// Connects as `global` says.
    pub async fn new(global: &Global) -> Result<Self> {
        let options = KubeConfigOptions {
            context: global.context.clone(),
            ..Default::default()
        };
        let config = match &global.kubeconfig {
            Some(paths) => {
                // $KUBECONFIG may list several files, as kubectl merges them.
                let mut merged: Option<Kubeconfig> = None;
                for path in std::env::split_paths(paths).filter(|p| !p.as_os_str().is_empty()) {
                    let one = Kubeconfig::read_from(&path).map_err(|e| {
                        Error::Kubeconfig(format!(
                            "--kubeconfig {}: {e}; give a readable kubeconfig file",
                            path.display()
                        ))
                    })?;
                    merged = Some(match merged {
                        None => one,
                        Some(m) => m
                            .merge(one)
                            .map_err(|e| Error::Kubeconfig(format!("--kubeconfig {paths}: {e}")))?,
                    });
                }
                let kc = merged.ok_or_else(|| {
                    Error::Kubeconfig("--kubeconfig is empty; give a kubeconfig file".into())
                })?;
                kube::Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| e.to_string())
            }
            None if global.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| e.to_string()),
            None => kube::Config::infer().await.map_err(|e| e.to_string()),
        }
        .map_err(|e| {
            Error::Kubeconfig(format!(
                "no usable Kubernetes configuration: {e}; set --kubeconfig or $KUBECONFIG, or \
                 --context to a context of it"
            ))
        })?;
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = booking_shared::client::client(config)
            .map_err(|e| Error::Kubeconfig(format!("cannot build a Kubernetes client: {e}")))?;
        Ok(Self {
            client,
            namespace,
            all_namespaces: global.all_namespaces,
        })
    }
}
