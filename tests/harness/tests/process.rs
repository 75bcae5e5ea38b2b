//! Process management: logs, readiness, stop by PID (process group), kept logs on panic.

use std::time::{Duration, Instant};

use booking_harness::process::{ProcessBuilder, Readiness};
use booking_harness::{Error, TestDir, free_port};

fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; look at its state.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn captures_logs_and_waits_for_tcp_readiness() {
    let dir = TestDir::new("process-ready").expect("test dir");
    let port = free_port().expect("free port");
    let script = format!(
        "import socket,sys,time\n\
         print('hello stdout', flush=True)\n\
         print('hello stderr', file=sys.stderr, flush=True)\n\
         time.sleep(0.3)\n\
         s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('127.0.0.1', {port})); s.listen()\n\
         time.sleep(60)\n"
    );
    let mut p = ProcessBuilder::new("listener", "python3")
        .args(["-c", &script])
        .spawn(&dir)
        .expect("spawn");
    let addr = format!("127.0.0.1:{port}").parse().expect("addr");
    p.wait_ready(&Readiness::Tcp(addr), Duration::from_secs(10))
        .await
        .expect("ready");
    let out = std::fs::read_to_string(p.stdout_path()).expect("stdout log");
    let err = std::fs::read_to_string(p.stderr_path()).expect("stderr log");
    assert_eq!(out, "hello stdout\n");
    assert_eq!(err, "hello stderr\n");
    assert!(p.stdout_path().starts_with(dir.path()));
    assert!(p.log_tail(5).contains("hello stderr"));
}

#[tokio::test]
async fn early_exit_reports_status_and_log_tail() {
    let dir = TestDir::new("process-exit").expect("test dir");
    let mut p = ProcessBuilder::new("crasher", "sh")
        .args(["-c", "echo 'fatal: port in use' >&2; exit 3"])
        .spawn(&dir)
        .expect("spawn");
    let err = p
        .wait_ready(
            &Readiness::Http("http://127.0.0.1:1/".into()),
            Duration::from_secs(10),
        )
        .await
        .expect_err("must not be ready");
    assert!(matches!(err, Error::ExitedEarly { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("crasher exited"), "{msg}");
    assert!(msg.contains("fatal: port in use"), "{msg}");
}

#[tokio::test]
async fn readiness_deadline_names_the_probe_and_logs() {
    let dir = TestDir::new("process-timeout").expect("test dir");
    let port = free_port().expect("free port");
    let mut p = ProcessBuilder::new("sleeper", "sh")
        .args(["-c", "echo still starting; sleep 30"])
        .spawn(&dir)
        .expect("spawn");
    let started = Instant::now();
    let err = p
        .wait_ready(
            &Readiness::Http(format!("http://127.0.0.1:{port}/healthz")),
            Duration::from_millis(400),
        )
        .await
        .expect_err("nothing listens");
    assert!(started.elapsed() < Duration::from_secs(5));
    let msg = err.to_string();
    assert!(matches!(err, Error::NotReady { .. }), "{err:?}");
    assert!(msg.contains("sleeper not ready"), "{msg}");
    assert!(msg.contains("still starting"), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
}

#[test]
fn drop_kills_the_whole_process_group() {
    let dir = TestDir::new("process-group").expect("test dir");
    let pid_file = dir.join("grandchild.pid");
    // The shell starts a grandchild that ignores SIGTERM, then waits: stopping must reach
    // the grandchild too (SIGKILL to the group after the grace period).
    let p = ProcessBuilder::new("group", "sh")
        .args([
            "-c",
            &format!(
                "sh -c 'trap \"\" TERM; echo $$ > {}; while true; do sleep 0.1; done' & wait",
                pid_file.display()
            ),
        ])
        .spawn(&dir)
        .expect("spawn");
    let leader = p.pid();
    let deadline = Instant::now() + Duration::from_secs(5);
    let grandchild = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "grandchild never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(alive(grandchild));
    drop(p);
    // The grandchild was re-parented (to init or a subreaper), which reaps it promptly.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(grandchild) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(grandchild), "grandchild {grandchild} survived");
    assert!(!alive(leader), "leader {leader} survived");
}

#[test]
fn explicit_stop_returns_the_exit_status_and_is_idempotent() {
    let dir = TestDir::new("process-stop").expect("test dir");
    let mut p = ProcessBuilder::new("sleep", "sleep")
        .arg("30")
        .spawn(&dir)
        .expect("spawn");
    let started = Instant::now();
    let status = p.stop().expect("stop");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "SIGTERM suffices"
    );
    assert!(!status.success());
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15));
    assert_eq!(p.stop().expect("second stop").signal(), Some(15));
}

#[test]
fn test_dir_is_removed_after_success_and_kept_after_panic() {
    let dir = TestDir::new("dir-ok").expect("test dir");
    let path = dir.path().to_path_buf();
    std::fs::write(dir.join("f"), "x").expect("write");
    drop(dir);
    assert!(!path.exists());

    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let dir = TestDir::new("dir-panic").expect("test dir");
        tx.send(dir.path().to_path_buf()).expect("send");
        panic!("simulated test failure");
    });
    assert!(handle.join().is_err());
    let kept = rx.recv().expect("path");
    assert!(kept.exists(), "kept after panic");
    std::fs::remove_dir_all(&kept).expect("clean up");
}

#[test]
fn missing_venv_tool_says_to_run_make_venv() {
    let err = booking_harness::paths::venv_bin("no-such-tool-here").expect_err("missing");
    let msg = err.to_string();
    assert!(msg.contains("make venv"), "{msg}");
}

#[test]
fn python_helpers_exit_when_their_parent_is_killed() {
    let dir = TestDir::new("process-orphan").expect("test dir");
    let python = booking_harness::paths::venv_python().expect("venv (run `make venv`)");
    let script = booking_harness::paths::python_script("smtp_server.py").expect("script");
    let pid_file = dir.join("smtp.pid");
    let port = free_port().expect("port");
    // An intermediate shell starts the helper; killing the shell alone (SIGKILL, no cleanup)
    // orphans the helper, which must notice and exit by itself.
    let shell = ProcessBuilder::new("intermediate", "sh")
        .args([
            "-c",
            &format!(
                "'{}' '{}' --port {port} --maildir '{}' & echo $! > '{}'; wait",
                python.display(),
                script.display(),
                dir.join("mail").display(),
                pid_file.display()
            ),
        ])
        .spawn(&dir)
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(10);
    let helper = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "helper never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Let the helper start its watchdog (it parses arguments first).
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "helper never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let shell_pid = rustix::process::Pid::from_raw(i32::try_from(shell.pid()).expect("pid"))
        .expect("non-zero pid");
    rustix::process::kill_process(shell_pid, rustix::process::Signal::KILL).expect("kill shell");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(helper) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(helper), "orphaned helper {helper} kept running");
    drop(shell);
}
