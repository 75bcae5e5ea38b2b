//! The CI smoke run of the benchmark harness: `booking-bench --smoke` against the debug
//! `booking-webhook` and the bare TLS echo server, with two private control planes (etcd and
//! kube-apiserver of the tested release) started by the run, for about twenty seconds. It
//! checks that the harness works (control planes start, bookings are created through the real
//! API server, the webhook's index is fed by its watch, the load client completes requests,
//! the real API server calls the webhook through the shipped configurations, the load's review
//! is captured from the real API server, the large index is fed, the results file is written);
//! it asserts no performance figure. A second run does the same for the controller's API load
//! and start-up sections.

use std::path::{Path, PathBuf};

#[test]
fn smoke_run_writes_the_webhook_figures() {
    let results = smoke_run("booking-webhook", "webhook");
    for key in [
        "webhook_rps_peak",
        "tls_echo_rps_peak",
        "webhook_rps_ratio_to_tls_echo",
        "webhook_p99_ms_at_200rps_0_bookings",
        "webhook_p99_ms_at_200rps_10k_bookings",
        "webhook_p99_ratio_10k_over_0",
        "webhook_bookings_create_seconds",
        "booking_create_p50_ms_with_webhook",
        "booking_create_p99_ms_with_webhook",
        "booking_create_p50_ms_without_webhook",
        "booking_create_p99_ms_without_webhook",
        "webhook_own_ms_per_review_mutate_real_create",
        "webhook_own_ms_per_review_validate_real_create",
        "webhook_rss_mib_100k_bookings",
    ] {
        let v = results[key].as_f64();
        assert!(
            v.is_some_and(|v| v.is_finite() && v > 0.0),
            "{key} missing or not positive in {results}"
        );
    }
    // The difference may be of either sign on a noisy machine; it must be there.
    for key in [
        "webhook_added_create_p50_ms",
        "webhook_added_create_p99_ms",
        "webhook_added_p50_ms_real_create_10k",
        "webhook_added_p99_ms_real_create_10k",
    ] {
        assert!(
            results[key].as_f64().is_some_and(f64::is_finite),
            "{key} missing in {results}"
        );
    }
}

/// `--smoke --sections api-load,startup` against the debug controller: the audit log of a
/// private control plane counts the requests of the controller, running as the shipped
/// ServiceAccount, over one short booking's life (its reminder mail reaching the real SMTP
/// server) and an idle window; the start-up round sees the StartInstances of a booking begun
/// while no controller ran. It asserts no figure, only that each is there (an idle count may be
/// zero; a life is never without requests).
#[test]
fn smoke_run_writes_the_api_load_and_startup_figures() {
    let results = smoke_run("booking-controller", "api-load,startup");
    for key in [
        "controller_api_requests_per_booking_lifecycle",
        "controller_api_requests_per_booking_lifecycle_booking_status_writes",
        "controller_api_requests_per_booking_lifecycle_resource_status_writes",
        "controller_api_requests_lifecycle_seconds",
        "controller_startup_seconds_10k_bookings",
        "controller_startup_readyz_seconds_10k_bookings",
    ] {
        let v = results[key].as_f64();
        assert!(
            v.is_some_and(|v| v.is_finite() && v > 0.0),
            "{key} missing or not positive in {results}"
        );
    }
    for key in [
        "controller_api_requests_per_idle_minute_10k",
        "controller_api_requests_per_idle_minute_10k_patch",
        "controller_api_requests_per_booking_lifecycle_list",
    ] {
        assert!(
            results[key]
                .as_f64()
                .is_some_and(|v| v.is_finite() && v >= 0.0),
            "{key} missing in {results}"
        );
    }
}

/// `booking-bench --smoke --sections <sections>` against the debug binaries (`binary` among
/// them); its results.
fn smoke_run(binary: &str, sections: &str) -> serde_json::Value {
    let echo = PathBuf::from(env!("CARGO_BIN_EXE_booking-bench-echo"));
    let bin_dir = echo.parent().expect("the binaries' folder").to_owned();
    let under_test = bin_dir.join(binary);
    assert!(
        under_test.is_file(),
        "{} is missing: build it first (cargo build -p {binary})",
        under_test.display()
    );
    let out_dir = tempfile::tempdir().expect("a temporary folder");
    let out = out_dir.path().join("results.json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_booking-bench"))
        .arg("--smoke")
        .args(["--sections", sections])
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--out")
        .arg(&out)
        .status()
        .expect("booking-bench runs");
    assert!(status.success(), "booking-bench --smoke failed: {status}");
    read(&out)
}

fn read(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} is missing: {e}", path.display()));
    serde_json::from_str(&text).expect("results.json is JSON")
}
