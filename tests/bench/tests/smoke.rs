//! The CI smoke run of the benchmark harness: `booking-bench --smoke` against the debug
//! `booking-webhook` and the bare TLS echo server for about ten seconds. It checks that the
//! harness works (servers start, the index is fed, the load client completes requests, the
//! results file is written); it asserts no performance figure.

use std::path::{Path, PathBuf};

#[test]
fn smoke_run_writes_the_webhook_figures() {
    let echo = PathBuf::from(env!("CARGO_BIN_EXE_booking-bench-echo"));
    let bin_dir = echo.parent().expect("the binaries' folder").to_owned();
    let webhook = bin_dir.join("booking-webhook");
    assert!(
        webhook.is_file(),
        "{} is missing: build it first (cargo build -p booking-webhook)",
        webhook.display()
    );
    let out_dir = tempfile::tempdir().expect("a temporary folder");
    let out = out_dir.path().join("results.json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_booking-bench"))
        .arg("--smoke")
        .args(["--sections", "webhook"])
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--out")
        .arg(&out)
        .status()
        .expect("booking-bench runs");
    assert!(status.success(), "booking-bench --smoke failed: {status}");
    let results = read(&out);
    for key in [
        "webhook_rps_peak",
        "tls_echo_rps_peak",
        "webhook_rps_ratio_to_tls_echo",
        "webhook_p99_ms_at_200rps_0_bookings",
        "webhook_p99_ms_at_200rps_10k_bookings",
        "webhook_p99_ratio_10k_over_0",
    ] {
        let v = results[key].as_f64();
        assert!(
            v.is_some_and(|v| v.is_finite() && v > 0.0),
            "{key} missing or not positive in {results}"
        );
    }
}

fn read(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} is missing: {e}", path.display()));
    serde_json::from_str(&text).expect("results.json is JSON")
}
