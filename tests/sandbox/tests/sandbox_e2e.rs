//! End to end through the sandbox as a user drives it, on its real control plane (etcd,
//! kube-apiserver, kube-controller-manager): `booking-sandbox up`, then only the env file,
//! kubectl and an AWS client to book a group and watch its instances start and stop, then
//! `booking-sandbox down`, checking nothing is left running; and `booking-sandbox demo` stopped
//! by Ctrl-C, also after its output pipe was closed.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SANDBOX: &str = env!("CARGO_BIN_EXE_booking-sandbox");

/// How many consecutive ports one sandbox uses.
const PORTS: u16 = 9;
/// How many processes a sandbox records: etcd, kube-apiserver, kube-controller-manager, moto,
/// SMTP, webhook, controller.
const PROCESSES: usize = 7;

/// The sandbox of one test: a state directory and a block of free ports; `down` on drop so
/// that a failing test leaves nothing running.
struct Sandbox {
    dir: tempfile::TempDir,
    port_base: u16,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("booking-sandbox-e2e-")
            .tempdir()
            .expect("temporary directory");
        Sandbox {
            dir,
            port_base: free_port_block(PORTS),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(SANDBOX)
            .args(args)
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--port-base")
            .arg(self.port_base.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("running booking-sandbox")
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "booking-sandbox {args:?} failed:\n{text}\n{}",
            self.logs()
        );
        text
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        if let Ok(entries) = std::fs::read_dir(self.dir.path().join("logs")) {
            for e in entries.flatten() {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                all.push_str(&format!(
                    "--- {} ---\n{}\n",
                    e.path().display(),
                    lines[lines.len().saturating_sub(25)..].join("\n")
                ));
            }
        }
        all
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let out = self.run(&["down"]);
        if !out.status.success() {
            eprintln!(
                "booking-sandbox down failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A port such that it and the `n - 1` ports after it are free on 127.0.0.1.
/// A block of `n` consecutive free ports below the kernel's ephemeral range (32768 and up on
/// Linux), where no outgoing connection of another test can take one of them as its source
/// port between this check and the sandbox binding it.
fn free_port_block(n: u16) -> u16 {
    let mut rng = fastrand::Rng::new();
    for _ in 0..200 {
        let base = rng.u16(20_000..32_000 - n);
        if (base..base + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("found no block of {n} free ports in 20000..32000");
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).expect("env file");
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or(v);
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn kubectl(env: &BTreeMap<String, String>, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", &env["KUBECONFIG"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl must be installed for this test");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("writing kubectl's stdin");
    drop(input);
    child.wait_with_output().expect("kubectl")
}

fn booking_yaml(name: &str, resource: &str, start: &str, end: &str) -> String {
    format!(
        "apiVersion: manager.kotaico.de/v1\nkind: Booking\nmetadata:\n  name: {name}\nspec:\n  \
         resource_name: {resource}\n  start_at: \"{start}\"\n  end_at: \"{end}\"\n  user_id: e2e-user\n"
    )
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The states of the EC2 instances tagged `<prefix>application=<group>`, by AWS SDK against
/// the env file's endpoint.
async fn group_states(env: &BTreeMap<String, String>, group: &str) -> Vec<String> {
    use aws_sdk_ec2::config::{Credentials, Region};
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(Region::new(env["AWS_REGION"].clone()))
        .endpoint_url(env["AWS_ENDPOINT_URL"].clone())
        .credentials_provider(Credentials::new(
            env["AWS_ACCESS_KEY_ID"].clone(),
            env["AWS_SECRET_ACCESS_KEY"].clone(),
            None,
            None,
            "sandbox-env",
        ))
        .build();
    let ec2 = aws_sdk_ec2::Client::from_conf(config);
    let filter = aws_sdk_ec2::types::Filter::builder()
        .name(format!("tag:{}application", env["TAG_PREFIX"]))
        .values(group)
        .build();
    let out = ec2
        .describe_instances()
        .filters(filter)
        .send()
        .await
        .expect("DescribeInstances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| {
            i.state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_owned())
        })
        .collect()
}

async fn wait_states(env: &BTreeMap<String, String>, group: &str, want: &str, timeout: Duration) {
    let start = Instant::now();
    loop {
        let states = group_states(env, group).await;
        if !states.is_empty() && states.iter().all(|s| s == want) {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "group {group} not {want} after {timeout:?}: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next()),
            Some("Z" | "X")
        ),
        Err(_) => false,
    }
}

/// Sends `signal` (`INT`, `HUP`) to the demo, waits up to 30 s for it to exit, and asserts that
/// it exited successfully and that none of the processes it recorded still runs. Returns the text
/// of `log` (the demo's output or error file), which the failure messages show.
async fn signal_demo_and_wait(
    demo: &mut std::process::Child,
    signal: &str,
    pids: &[(String, u32)],
    log: &Path,
) -> String {
    let sent = Command::new("kill")
        .args([format!("-{signal}"), demo.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = demo.try_wait().expect("demo status") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not stop after SIG{signal}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "demo failed ({status}):\n{text}");
    for (name, pid) in pids {
        assert!(
            !pid_alive(*pid),
            "{name} (pid {pid}) still runs after the demo:\n{text}"
        );
    }
    text
}

fn recorded_pids(dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir.join("pids"))
        .expect("pids directory")
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).expect("pid file");
        let pid = text
            .lines()
            .next()
            .and_then(|l| l.parse().ok())
            .expect("pid");
        out.push((e.file_name().to_string_lossy().into_owned(), pid));
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_up_book_a_group_then_down() {
    let sandbox = Sandbox::new();
    sandbox.run_ok(&["up"]);
    let env_path: PathBuf = sandbox.dir.path().join("env");
    let env = read_env(&env_path);
    for key in [
        "KUBECONFIG",
        "NAMESPACE",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "TAG_PREFIX",
        "MAIL_DIR",
        "WEBHOOK_URL",
        "WEBHOOK_CA_FILE",
        "CONTROLLER_METRICS_URL",
        "WEBHOOK_METRICS_URL",
        "BOOKING_BIN_DIR",
    ] {
        assert!(
            env.get(key).is_some_and(|v| !v.is_empty()),
            "{key} missing from the env file: {env:?}"
        );
    }
    assert!(Path::new(&env["MAIL_DIR"]).is_dir());
    assert!(
        std::fs::read_to_string(&env["WEBHOOK_CA_FILE"])
            .expect("CA file")
            .contains("BEGIN CERTIFICATE")
    );
    let pids = recorded_pids(sandbox.dir.path());
    assert_eq!(pids.len(), PROCESSES, "{pids:?}");

    // Idempotent: a second `up` finds it running and starts nothing.
    let again = sandbox.run_ok(&["up"]);
    assert!(again.contains("already running"), "{again}");
    assert_eq!(recorded_pids(sandbox.dir.path()), pids);

    // The env file's KUBECTL is the control plane's own release (v1.37.2 unless the binaries
    // come from KUBEBUILDER_ASSETS / TEST_ASSET_*), the API server's.
    let version = Command::new(&env["KUBECTL"])
        .args(["version", "-o", "json"])
        .env("KUBECONFIG", &env["KUBECONFIG"])
        .output()
        .expect("running the env file's KUBECTL");
    assert!(
        version.status.success(),
        "{}",
        String::from_utf8_lossy(&version.stderr)
    );
    let version: serde_json::Value =
        serde_json::from_slice(&version.stdout).expect("kubectl version -o json");
    let server = version["serverVersion"]["gitVersion"]
        .as_str()
        .unwrap_or_default();
    assert!(server.starts_with("v1."), "{version}");
    assert_eq!(server, version["clientVersion"]["gitVersion"], "{version}");

    let ns = env["NAMESPACE"].as_str();
    // The ResourceMonitor created the Resource for the free group.
    let start_wait = Instant::now();
    loop {
        let out = kubectl(
            &env,
            &["get", "resource", "ec2.batch", "-n", ns, "-o", "name"],
            None,
        );
        if out.status.success() {
            break;
        }
        assert!(
            start_wait.elapsed() < Duration::from_secs(60),
            "Resource ec2.batch never appeared: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    wait_states(&env, "batch", "stopped", Duration::from_secs(5)).await;

    // Book the group for 20 s starting in 8 s.
    let start = chrono::Utc::now() + chrono::Duration::seconds(8);
    let end = start + chrono::Duration::seconds(20);
    let good = booking_yaml("e2e-batch", "ec2.batch", &rfc3339(start), &rfc3339(end));
    let out = kubectl(&env, &["apply", "-n", ns, "-f", "-"], Some(&good));
    assert!(
        out.status.success(),
        "booking refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The kubectl plugin, found as the README says: the env file's BOOKING_BIN_DIR on the PATH.
    let path = format!(
        "{}:{}",
        env["BOOKING_BIN_DIR"],
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new(&env["KUBECTL"])
        .args(["booking", "status", "ec2.batch", "-n", ns])
        .env("KUBECONFIG", &env["KUBECONFIG"])
        .env("PATH", path)
        .output()
        .expect("running kubectl booking");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && text.contains("e2e-batch") && text.contains("e2e-user"),
        "kubectl booking status:\n{text}\n{}",
        String::from_utf8_lossy(&status.stderr)
    );

    // The real admission path: the API server calls the webhook, which refuses a booking
    // overlapping the one just made (no schema rule can see that).
    let overlapping = booking_yaml(
        "e2e-overlap",
        "ec2.batch",
        &rfc3339(start + chrono::Duration::seconds(5)),
        &rfc3339(end + chrono::Duration::minutes(5)),
    );
    let out = kubectl(&env, &["apply", "-n", ns, "-f", "-"], Some(&overlapping));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an overlapping booking was admitted");
    assert!(
        stderr.contains("denied") && stderr.contains("webhook"),
        "refused, but not by the webhook: {stderr}"
    );

    wait_states(&env, "batch", "running", Duration::from_secs(40)).await;
    assert!(
        chrono::Utc::now() >= start - chrono::Duration::seconds(1),
        "started before the booking's start"
    );
    wait_states(&env, "batch", "stopped", Duration::from_secs(60)).await;
    assert!(
        chrono::Utc::now() >= end - chrono::Duration::seconds(1),
        "stopped before the booking's end"
    );
    let out = kubectl(
        &env,
        &[
            "get",
            "booking",
            "e2e-batch",
            "-n",
            ns,
            "-o",
            "jsonpath={.status.status}",
        ],
        None,
    );
    let phase = String::from_utf8_lossy(&out.stdout).into_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut phase = phase;
    while phase != "FINISHED" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let out = kubectl(
            &env,
            &[
                "get",
                "booking",
                "e2e-batch",
                "-n",
                ns,
                "-o",
                "jsonpath={.status.status}",
            ],
            None,
        );
        phase = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    assert_eq!(phase, "FINISHED");

    // A crashed process: `down` still stops the rest and succeeds.
    let (_, smtp_pid) = pids
        .iter()
        .find(|(f, _)| f.ends_with("-smtp.pid"))
        .cloned()
        .expect("smtp recorded");
    let kill = Command::new("kill")
        .args(["-KILL", &smtp_pid.to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());

    let down = sandbox.run_ok(&["down"]);
    assert!(down.contains("smtp"), "{down}");
    for (name, pid) in &pids {
        assert!(!pid_alive(*pid), "{name} (pid {pid}) still runs after down");
    }
    for p in sandbox.port_base..sandbox.port_base + PORTS {
        // The listeners are closed (a process of the sandbox would hold them).
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", p)).is_ok(),
            "port {p} still in use after down"
        );
    }
    assert!(!env_path.exists(), "env file left behind");
    assert!(
        !sandbox.dir.path().join("pids").exists() || recorded_pids(sandbox.dir.path()).is_empty()
    );
    // Down again: nothing runs, still a success.
    let again = sandbox.run_ok(&["down"]);
    assert!(again.contains("Nothing was running"), "{again}");
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_shows_the_booking_running_and_stops_everything_on_ctrl_c() {
    let sandbox = Sandbox::new();
    let out_path = sandbox.dir.path().join("demo.out");
    let out = std::fs::File::create(&out_path).expect("demo output file");
    let mut demo = Command::new(SANDBOX)
        .arg("demo")
        .arg("--dir")
        .arg(sandbox.dir.path())
        .arg("--port-base")
        .arg(sandbox.port_base.to_string())
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("file handle"))
        .stderr(out)
        .spawn()
        .expect("starting the demo");
    // The view shows the sample booking in progress and its two instances running in moto.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let frame = text
            .rsplit("Booking sandbox — ")
            .next()
            .unwrap_or_default()
            .to_owned();
        let web_running = frame
            .lines()
            .filter(|l| l.contains("group web") && l.trim_end().ends_with("running"))
            .count();
        if frame.contains("demo-web") && frame.contains("IN PROGRESS") && web_running == 2 {
            assert!(frame.contains("== MAILS RECEIVED"), "{frame}");
            assert!(frame.contains("== EVENTS"), "{frame}");
            assert!(text.contains("source "), "no kubectl hint:\n{text}");
            break;
        }
        if let Some(status) = demo.try_wait().expect("demo status") {
            panic!("demo exited ({status}):\n{text}\n{}", sandbox.logs());
        }
        assert!(
            Instant::now() < deadline,
            "the demo never showed demo-web running:\n{text}\n{}",
            sandbox.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pids = recorded_pids(sandbox.dir.path());
    assert_eq!(pids.len(), PROCESSES, "{pids:?}");

    // Ctrl-C: the demo stops everything it started and exits successfully.
    let text = signal_demo_and_wait(&mut demo, "INT", &pids, &out_path).await;
    assert!(text.contains("Stopped:"), "{text}");
    assert!(
        !sandbox.dir.path().join("env").exists(),
        "env file left behind"
    );
}

/// `make demo 2>&1 | tee demo.log`, then Ctrl-C: the terminal's SIGINT reaches `tee` too, so the
/// demo's output pipe is gone when it starts stopping. It must still stop everything it started
/// (it neither panics on the failed write nor dies of SIGPIPE).
#[tokio::test(flavor = "multi_thread")]
async fn demo_stops_everything_when_its_output_pipe_closes_and_ctrl_c_comes() {
    use std::io::Read as _;
    let sandbox = Sandbox::new();
    let err_path = sandbox.dir.path().join("demo.err");
    let err = std::fs::File::create(&err_path).expect("demo stderr file");
    let mut demo = Command::new(SANDBOX)
        .arg("demo")
        .arg("--dir")
        .arg(sandbox.dir.path())
        .arg("--port-base")
        .arg(sandbox.port_base.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .expect("starting the demo");
    // Read the pipe until the first frame of the view, then close its read end (the reader
    // thread drops it), as `tee` does when Ctrl-C ends it.
    let mut stdout = demo.stdout.take().expect("demo stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            if String::from_utf8_lossy(&seen).contains("Booking sandbox — ") {
                break;
            }
        }
        drop(stdout);
        let _ = tx.send(String::from_utf8_lossy(&seen).into_owned());
    });
    let seen = rx
        .recv_timeout(Duration::from_secs(600))
        .expect("the demo printed nothing within 10 minutes");
    assert!(
        seen.contains("Booking sandbox — "),
        "the demo ended before showing its view:\n{seen}\n{}\n{}",
        std::fs::read_to_string(&err_path).unwrap_or_default(),
        sandbox.logs()
    );
    let pids = recorded_pids(sandbox.dir.path());
    assert_eq!(pids.len(), PROCESSES, "{pids:?}");

    let err_text = signal_demo_and_wait(&mut demo, "INT", &pids, &err_path).await;
    assert!(!err_text.contains("panicked"), "{err_text}");
    assert!(
        !sandbox.dir.path().join("env").exists(),
        "env file left behind"
    );
}

/// A terminal that closes sends SIGHUP: the demo stops everything it started, as on Ctrl-C.
#[tokio::test(flavor = "multi_thread")]
async fn demo_stops_everything_when_its_terminal_hangs_up() {
    let sandbox = Sandbox::new();
    let out_path = sandbox.dir.path().join("demo.out");
    let out = std::fs::File::create(&out_path).expect("demo output file");
    let mut demo = Command::new(SANDBOX)
        .arg("demo")
        .arg("--dir")
        .arg(sandbox.dir.path())
        .arg("--port-base")
        .arg(sandbox.port_base.to_string())
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("file handle"))
        .stderr(out)
        .spawn()
        .expect("starting the demo");
    let deadline = Instant::now() + Duration::from_secs(600);
    while !std::fs::read_to_string(&out_path)
        .unwrap_or_default()
        .contains("Booking sandbox — ")
    {
        if let Some(status) = demo.try_wait().expect("demo status") {
            panic!(
                "demo exited ({status}):\n{}\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default(),
                sandbox.logs()
            );
        }
        assert!(Instant::now() < deadline, "the demo never showed its view");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let pids = recorded_pids(sandbox.dir.path());
    assert_eq!(pids.len(), PROCESSES, "{pids:?}");
    let text = signal_demo_and_wait(&mut demo, "HUP", &pids, &out_path).await;
    assert!(text.contains("SIGHUP: stopping the sandbox"), "{text}");
}
