//! Prints the operator's CustomResourceDefinitions as YAML, or writes one file per CRD.
//!
//! ```text
//! crdgen                              # all four CRDs to stdout, as one multi-document stream
//! crdgen --out-dir manifests/crds     # one <plural>.<group>.yaml file per CRD
//! ```

use std::{path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let out_dir = match (args.next().as_deref(), args.next()) {
        (None, _) => None,
        (Some("--out-dir"), Some(dir)) => Some(PathBuf::from(dir)),
        _ => {
            eprintln!("usage: crdgen [--out-dir DIR]");
            return ExitCode::from(2);
        }
    };
    for crd in booking_shared::crd::all() {
        let yaml = match booking_shared::crd::to_yaml(&crd) {
            Ok(y) => y,
            Err(e) => {
                eprintln!(
                    "crdgen: cannot serialise {}: {e}",
                    booking_shared::crd::file_name(&crd)
                );
                return ExitCode::FAILURE;
            }
        };
        match &out_dir {
            None => print!("---\n{yaml}"),
            Some(dir) => {
                let path = dir.join(booking_shared::crd::file_name(&crd));
                if let Err(e) = std::fs::write(&path, yaml) {
                    eprintln!("crdgen: cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
