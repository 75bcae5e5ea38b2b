//! The original operator's make workflow, run for real: `make install` into the run's shared
//! control plane, `make run` (controller and webhook of this checkout against it, AWS on moto,
//! Ctrl-C stops both), `make deploy`/`undeploy` with image variables into a control plane of the
//! test's own (the install registers cluster-wide webhook configurations), the image targets
//! and the plugin wrappers (`make -n`: no Docker engine here; missing parameters), and the
//! plugin's krew archive installed by the real krew and run through the real kubectl.
//!
//! Every make runs with the control plane's kubectl (`KUBECTL=`) and a kubeconfig of the test's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use booking_harness::control_plane::{TestCluster, unique_name};
use booking_harness::process::ProcessBuilder;
use booking_harness::{TestDir, free_port};
use booking_shared::api::{Booking, Resource};
use booking_tests::e2e::{self, wait_for};
use booking_tests::packaging::*;
use booking_tests::{output_with_stdin, repo_root};
use kube::api::{Api, PostParams};
use serde_json::Value;

// === running make ===

/// `make -C <checkout> <args>` with the control plane's kubectl, `kubeconfig` (none when
/// `None`), the test binaries' target folder, and nothing of an outer make (`make test`).
fn make(kubeconfig: Option<&Path>, args: &[&str]) -> Command {
    let mut c = Command::new("make");
    c.arg("--no-print-directory")
        .arg("-C")
        .arg(repo_root())
        .args(args)
        .arg(format!("KUBECTL={}", tool("kubectl").display()))
        .env("KUBECONFIG", kubeconfig.unwrap_or(Path::new("/dev/null")))
        .env("CARGO_TARGET_DIR", target_dir())
        .env("INVENTORY_INTERVAL_SECONDS", "2");
    // CARGO (set for tests) would name cargo by its full path; make's default is `cargo`.
    for var in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CARGO"] {
        c.env_remove(var);
    }
    c
}

/// Runs `cmd`, whatever its outcome.
fn output(cmd: &mut Command) -> Output {
    output_with_stdin(cmd, "")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `cmd` and expects success; its stdout and stderr together.
fn succeeds(cmd: &mut Command) -> String {
    let out = output(cmd);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{all}",
        out.status
    );
    all
}

/// Runs `cmd` and expects failure; its stderr.
fn fails(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        !out.status.success(),
        "{cmd:?} succeeded:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// The target folder the test binaries and the workspace's binaries were built into.
fn target_dir() -> PathBuf {
    let controller = e2e::controller_binary();
    controller
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/booking-controller")
        .to_path_buf()
}

/// The context and server `kubeconfig` names.
fn context_of(kubeconfig: &Path) -> (String, String) {
    let mut k = kubectl_cmd();
    k.env("KUBECONFIG", kubeconfig);
    let context = run(k.args(["config", "current-context"]), "kubectl")
        .trim()
        .to_owned();
    let mut k = kubectl_cmd();
    k.env("KUBECONFIG", kubeconfig);
    let server = run(
        k.args([
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ]),
        "kubectl",
    );
    (context, server)
}

/// PIDs of the processes (not zombies) of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc") {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp …; comm may hold spaces, so split after its ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            members.push(pid);
        }
    }
    members
}

/// The PID that `make run` reported for `what` ("webhook", "controller").
fn reported_pid(log: &str, what: &str) -> u32 {
    let prefix = format!("make run: {what} pid ");
    log.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("make run reported no {what} pid:\n{log}"))
}

// === make install ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_install_applies_the_crds_into_the_chosen_context_and_they_are_established() {
    let cluster = TestCluster::shared("make-install")
        .await
        .expect("shared control plane");
    let dir = TestDir::new("make-install").expect("test dir");
    // A copy of the kubeconfig whose current context leads nowhere, and a context of the real
    // cluster under another name: CONTEXT= picks it.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::copy(cluster.kubeconfig_path(), &kubeconfig).unwrap();
    let (context, server) = context_of(&kubeconfig);
    let mut k = kubectl_cmd();
    k.env("KUBECONFIG", &kubeconfig);
    let user = run(
        k.args([
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.contexts[0].context.user}",
        ]),
        "kubectl",
    );
    for args in [
        vec![
            "config".to_owned(),
            "set-context".into(),
            "make-target".into(),
            format!("--cluster={context}"),
            format!("--user={user}"),
        ],
        vec![
            "config".into(),
            "set".into(),
            "current-context".into(),
            "nowhere".into(),
        ],
    ] {
        let mut k = kubectl_cmd();
        k.env("KUBECONFIG", &kubeconfig).args(&args);
        run(&mut k, "kubectl");
    }

    // The current context does not exist: make says so, and how to choose one.
    let err = fails(&mut make(Some(&kubeconfig), &["install"]));
    assert!(
        err.contains("make install: context nowhere is not in the kubeconfig"),
        "{err}"
    );

    let out = succeeds(&mut make(
        Some(&kubeconfig),
        &["install", "CONTEXT=make-target"],
    ));
    assert!(
        out.contains(&format!(
            "make install: installing the CRDs into context make-target ({server})"
        )),
        "{out}"
    );
    // A second install changes nothing and succeeds (other tests share these CRDs).
    succeeds(&mut make(
        Some(&kubeconfig),
        &["install", "CONTEXT=make-target"],
    ));

    let crd_files = booking_harness::paths::crd_files();
    assert_eq!(crd_files.len(), CRD_KINDS.len());
    for file in crd_files {
        let name = file.file_stem().unwrap().to_str().unwrap().to_owned();
        let mut k = cluster.kubectl().unwrap();
        let crd: Value = serde_json::from_str(&run(
            k.args(["get", "crd", &name, "--show-managed-fields", "-o", "json"]),
            "kubectl",
        ))
        .unwrap();
        let established = crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "{name}: {}", crd["status"]);
        let managers: BTreeSet<&str> = crd["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert!(
            managers.contains("booking-make"),
            "{name} was applied by make install (field manager booking-make): {managers:?}"
        );
    }
}

// === make run ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_run_reconciles_and_admits_against_the_cluster_and_ctrl_c_stops_both() {
    let e = e2e::env("make-run").await;
    let tag = unique_name("web");
    let members = e2e::stopped_group(&e.moto.ec2(), 2, &tag).await.len();
    let webhook_name = unique_name("make-run-webhook");
    let (webhook_port, webhook_admin, controller_admin) = (
        free_port().unwrap(),
        free_port().unwrap(),
        free_port().unwrap(),
    );
    let run_dir = e.dir.join("run");

    let args: Vec<String> = vec![
        "--no-print-directory".into(),
        "-C".into(),
        repo_root().display().to_string(),
        "run".into(),
        format!("KUBECTL={}", tool("kubectl").display()),
        format!("NAMESPACE={}", e.ns),
        "WEBHOOK=register".into(),
        format!("WEBHOOK_NAME={webhook_name}"),
        format!("WEBHOOK_ADDR=127.0.0.1:{webhook_port}"),
        format!("WEBHOOK_ADMIN_ADDR=127.0.0.1:{webhook_admin}"),
        format!("CONTROLLER_ADMIN_ADDR=127.0.0.1:{controller_admin}"),
        format!("RUN_DIR={}", run_dir.display()),
        // The binaries the test runs were built with the workspace (the e2e guard checks them);
        // `make run` without BIN_DIR builds them first, as `make -n run` shows below.
        format!("BIN_DIR={}", target_dir().join("debug").display()),
    ];
    let mut builder = ProcessBuilder::new("make-run", "make")
        .args(args)
        .envs(e.moto.env())
        .env("KUBECONFIG", e.cluster.kubeconfig_path())
        .env("CARGO_TARGET_DIR", target_dir())
        .env("INVENTORY_INTERVAL_SECONDS", "2");
    for var in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"] {
        builder = builder.env(var, "");
    }
    let mut make_run = builder.spawn(&e.dir).expect("make run starts");
    let log = |p: &booking_harness::process::ManagedProcess| {
        [p.stdout_path(), p.stderr_path()]
            .map(|f| std::fs::read_to_string(f).unwrap_or_default())
            .join("")
    };

    // Both are up and the webhook is registered (make may build first).
    wait_for(
        "make run to register the webhook",
        Duration::from_secs(240),
        || {
            let l = log(&make_run);
            async move {
                if l.contains("make run: running; Ctrl-C stops both") {
                    Ok(())
                } else {
                    Err(l.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
                }
            }
        },
    )
    .await;
    let l = log(&make_run);
    let (context, server) = context_of(e.cluster.kubeconfig_path());
    assert!(
        l.contains(&format!(
            "make run: running the controller and the webhook against context {context} ({server})"
        )),
        "{l}"
    );
    let pids = [reported_pid(&l, "webhook"), reported_pid(&l, "controller")];

    // The controller reconciles a Resource: its status counts the group's instances.
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    let name = format!("ec2.{tag}");
    resources
        .create(
            &PostParams::default(),
            &e2e::resource(&name, "ec2", &tag, None),
        )
        .await
        .unwrap();
    wait_for(
        "the local controller to write the Resource's status",
        Duration::from_secs(60),
        || {
            let api = resources.clone();
            let name = name.clone();
            async move {
                let r = api.get(&name).await.map_err(|e| e.to_string())?;
                match r.status {
                    Some(s) if s.instances as usize == members => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;

    // The webhook admits through its registration: it records who booked, and refuses a
    // booking that overlaps it.
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let start = chrono::Utc::now() + chrono::Duration::days(30);
    let first = e2e::booking("first", &name, start, start + chrono::Duration::hours(2));
    let created = bookings
        .create(&PostParams::default(), &first)
        .await
        .unwrap();
    assert!(
        created
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("manager.kotaico.de/requested-by"),
        "the local mutating webhook admitted the booking"
    );
    let overlapping = e2e::booking(
        "second",
        &name,
        start + chrono::Duration::hours(1),
        start + chrono::Duration::hours(3),
    );
    let refused = bookings
        .create(&PostParams::default(), &overlapping)
        .await
        .expect_err("the local validating webhook refuses an overlap");
    assert!(refused.to_string().contains("overlaps"), "{refused}");

    // Ctrl-C: every process of the foreground job gets SIGINT; both stop, the registration
    // is deleted, and nothing of the group is left.
    make_run.interrupt();
    let status = make_run
        .wait_exit(Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("make run still runs 30 s after Ctrl-C:\n{}", log(&make_run)));
    eprintln!("make run exited: {status}");
    let l = log(&make_run);
    assert!(
        l.contains("make run: stopping the controller and the webhook"),
        "{l}"
    );
    assert!(
        !l.contains("the controller or the webhook exited"),
        "Ctrl-C, not one of them exiting, stopped make run: {l}"
    );
    assert!(
        l.contains(&format!(
            "make run: unregistered the webhook configurations {webhook_name}"
        )),
        "{l}"
    );
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived make run"
        );
    }
    assert_eq!(
        group_members(make_run.pid()),
        Vec::<u32>::new(),
        "processes of make run's group outlived it"
    );
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let mut k = e.cluster.kubectl().unwrap();
        let out = output(k.args(["get", kind, &webhook_name]));
        assert!(
            !out.status.success() && text(&out.stderr).contains("NotFound"),
            "{kind} {webhook_name} is left: {}",
            text(&out.stdout)
        );
    }
}

// === make deploy / undeploy ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_deploy_installs_the_kustomize_base_with_the_chosen_images_and_undeploy_removes_it() {
    // A control plane of this test's own: the install registers cluster-wide webhook
    // configurations that would call a webhook that does not run.
    let p = Plane::start("make-deploy").await;
    p.register_cert_manager_kinds();
    let overlay = p.dir.join("deploy");
    let overlay_arg = format!("DEPLOY_DIR={}", overlay.display());
    let (context, server) = context_of(p.kubeconfig());

    let image_of = |name: &str| {
        let d = p.get(&["deployment", name, "-n", NAMESPACE]);
        d["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // Whole image names, a registry with a port, a digest.
    let controller_img = "registry.example:5000/team/booking-controller@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let webhook_img = "registry.example:5000/team/booking-webhook:pr-7";
    let out = succeeds(&mut make(
        Some(p.kubeconfig()),
        &[
            "deploy",
            &overlay_arg,
            &format!("CONTROLLER_IMG={controller_img}"),
            &format!("WEBHOOK_IMG={webhook_img}"),
        ],
    ));
    assert!(
        out.contains(&format!(
            "make deploy: deploying {controller_img} and {webhook_img} to context {context} ({server})"
        )),
        "{out}"
    );
    assert_eq!(image_of("booking-controller"), controller_img);
    assert_eq!(image_of("booking-webhook"), webhook_img);
    // The rest of the install is there as the base renders it.
    for o in base() {
        if kind_of(&o) == "CustomResourceDefinition" {
            p.get(&["crd", name_of(&o)]);
        }
    }
    p.get(&["serviceaccount", CONTROLLER_SA, "-n", NAMESPACE]);
    p.get(&["validatingwebhookconfiguration", "booking-webhook"]);

    // Registry and tag: IMG_REGISTRY/booking-{controller,webhook}:TAG, applied over the first.
    succeeds(&mut make(
        Some(p.kubeconfig()),
        &[
            "deploy",
            &overlay_arg,
            "IMG_REGISTRY=mirror.example/ops",
            "TAG=9.9.9",
        ],
    ));
    assert_eq!(
        image_of("booking-controller"),
        "mirror.example/ops/booking-controller:9.9.9"
    );
    assert_eq!(
        image_of("booking-webhook"),
        "mirror.example/ops/booking-webhook:9.9.9"
    );

    // A base without a kustomization is named.
    let err = fails(&mut make(
        Some(p.kubeconfig()),
        &["deploy", &overlay_arg, "DEPLOY_BASE=docs"],
    ));
    assert!(
        err.contains("DEPLOY_BASE=docs has no kustomization.yaml"),
        "{err}"
    );

    succeeds(&mut make(Some(p.kubeconfig()), &["undeploy", &overlay_arg]));
    for args in [
        vec!["deployment", "booking-controller", "-n", NAMESPACE],
        vec!["validatingwebhookconfiguration", "booking-webhook"],
        vec!["crd", "bookings.manager.kotaico.de"],
    ] {
        let mut all = vec!["get"];
        all.extend(&args);
        let out = p.k_output(&all, "");
        assert!(
            !out.status.success() && text(&out.stderr).contains("NotFound"),
            "{args:?} is left after make undeploy: {}",
            text(&out.stdout)
        );
    }
}

// === images and wrappers: what make would run ===

#[test]
fn docker_targets_build_and_push_the_two_images_with_the_image_variables() {
    let revision = run(
        Command::new("git")
            .arg("-C")
            .arg(repo_root())
            .args(["rev-parse", "HEAD"]),
        "git",
    );
    let revision = revision.trim();
    let lines = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["-n"];
        all.extend(args);
        succeeds(&mut make(None, &all))
            .lines()
            .filter(|l| !l.starts_with("command -v"))
            .map(str::to_owned)
            .collect()
    };
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        lines(&["docker-build"]),
        [
            format!(
                "docker build -f Dockerfile.controller -t ghcr.io/kotaicode/booking-controller:{version} --build-arg VERSION={version} --build-arg REVISION={revision} ."
            ),
            format!(
                "docker build -f Dockerfile.webhook -t ghcr.io/kotaicode/booking-webhook:{version} --build-arg VERSION={version} --build-arg REVISION={revision} ."
            ),
        ]
    );
    assert_eq!(
        lines(&[
            "docker-build",
            "docker-push",
            "CONTAINER_TOOL=podman",
            "IMG_REGISTRY=registry.example:5000/team",
            "TAG=1.2.3",
            "WEBHOOK_IMG=other.example/hook:x",
        ]),
        [
            format!(
                "podman build -f Dockerfile.controller -t registry.example:5000/team/booking-controller:1.2.3 --build-arg VERSION={version} --build-arg REVISION={revision} ."
            ),
            format!(
                "podman build -f Dockerfile.webhook -t other.example/hook:x --build-arg VERSION={version} --build-arg REVISION={revision} ."
            ),
            "podman push registry.example:5000/team/booking-controller:1.2.3".to_owned(),
            "podman push other.example/hook:x".to_owned(),
        ]
    );
    // The Dockerfiles named are the repository's.
    for f in ["Dockerfile.controller", "Dockerfile.webhook"] {
        assert!(repo_root().join(f).is_file(), "{f}");
    }

    // A tool that is not there is named, with what to do.
    for target in ["docker-build", "docker-push"] {
        let err = fails(&mut make(None, &[target, "CONTAINER_TOOL=no-such-builder"]));
        assert!(
            err.contains(&format!(
                "make {target}: CONTAINER_TOOL=no-such-builder is not on the PATH"
            )) && err.contains("CONTAINER_TOOL=podman"),
            "{err}"
        );
    }
}

#[test]
fn plugin_wrappers_pass_the_original_parameters_to_kubectl_booking_and_name_missing_ones() {
    let plugin = "/opt/bin/kubectl-booking";
    let bin = format!("KUBECTL_BOOKING={plugin}");
    let lines = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["-n", bin.as_str()];
        all.extend(args);
        succeeds(&mut make(None, &all))
            .lines()
            .map(|l| l.trim_end().to_owned())
            .collect()
    };
    assert_eq!(lines(&["list-instances"]), [format!("{plugin} instances")]);
    assert_eq!(
        lines(&["list-instances", "REGION=eu-west-1 us-east-1"]),
        [format!(
            "{plugin} instances --region eu-west-1 --region us-east-1"
        )]
    );
    assert_eq!(
        lines(&["mark-managed", "instances=i-0b1b i-0073", "enable=true"]),
        [format!("{plugin} manage i-0b1b i-0073")]
    );
    assert_eq!(
        lines(&[
            "mark-managed",
            "instances=i-0b1b",
            "enable=false",
            "REGION=eu-west-1"
        ]),
        [format!(
            "{plugin} manage i-0b1b --disable --region eu-west-1"
        )]
    );
    assert_eq!(
        lines(&["tag-instances", "instances=i-0b1b i-0073", "tag=web"]),
        [format!("{plugin} tag i-0b1b i-0073 --group web")]
    );
    // Without KUBECTL_BOOKING, the workspace's build (the build of make test) runs first.
    let out = succeeds(&mut make(None, &["-n", "list-instances"]));
    assert!(
        out.starts_with("cargo build --workspace --bins --locked\n")
            && out.contains(&format!(
                "{}/debug/kubectl-booking instances",
                target_dir().display()
            )),
        "{out}"
    );

    // So does make run without BIN_DIR, and then it runs the script with the build's folder.
    let out = succeeds(&mut make(None, &["-n", "run"]));
    assert!(
        out.starts_with("cargo build --workspace --bins --locked\n")
            && out.contains(&format!("BIN_DIR='{}/debug' ", target_dir().display()))
            && out.contains("exec bash tests/sandbox/run-local.sh"),
        "{out}"
    );

    // Missing or wrong parameters stop make before anything runs, naming the parameter and an
    // example of the call.
    for (args, message) in [
        (
            vec!["mark-managed"],
            "make mark-managed: the parameter instances is missing, e.g. make mark-managed instances=\"i-0abc i-0def\" enable=true",
        ),
        (
            vec!["mark-managed", "instances=i-1 i-2"],
            "make mark-managed: the parameter enable is missing, e.g. make mark-managed instances=\"i-1 i-2\" enable=true",
        ),
        (
            vec!["mark-managed", "instances=i-1", "enable=yes"],
            "make mark-managed: enable=yes is neither true nor false",
        ),
        (
            vec!["tag-instances", "tag=web"],
            "make tag-instances: the parameter instances is missing, e.g. make tag-instances instances=\"i-0abc i-0def\" tag=web",
        ),
        (
            vec!["tag-instances", "instances=i-1"],
            "make tag-instances: the parameter tag is missing, e.g. make tag-instances instances=\"i-1\" tag=web",
        ),
    ] {
        let mut all = vec![bin.as_str()];
        all.extend(&args);
        let err = fails(&mut make(None, &all));
        assert!(err.contains(message), "{args:?}: {err}");
    }

    // install-plugin: cargo install of the plugin crate, into PREFIX when given.
    assert_eq!(
        succeeds(&mut make(
            None,
            &["-n", "install-plugin", "PREFIX=/opt/tools"]
        ))
        .lines()
        .next(),
        Some("cargo install --path controller/plugin --locked --root /opt/tools")
    );
    assert_eq!(
        succeeds(&mut make(None, &["-n", "install-plugin"]))
            .lines()
            .next(),
        Some("cargo install --path controller/plugin --locked")
    );

    // make help lists every target of the workflow.
    let help = succeeds(&mut make(None, &["help"]));
    for target in [
        "make install",
        "make run",
        "make deploy",
        "make docker-build",
        "make list-instances",
        "make mark-managed",
        "make tag-instances",
        "make install-plugin",
        "make krew-archive",
    ] {
        assert!(help.contains(target), "make help lists {target}:\n{help}");
    }
}

// === the plugin through krew ===

/// krew, built from its Go module by `tests/krew/build.sh` (once, cached) or `$KREW`.
fn krew() -> PathBuf {
    let script = repo_root().join("tests/krew/build.sh");
    let out = run(
        Command::new("bash")
            .arg(&script)
            .stderr(std::process::Stdio::inherit()),
        "tests/krew/build.sh builds krew with Go (or set KREW to a prebuilt krew)",
    );
    PathBuf::from(out.trim())
}

#[test]
fn krew_installs_the_release_archive_and_kubectl_runs_the_plugin() {
    let dir = TestDir::new("make-krew").expect("test dir");
    let out_dir = dir.join("krew-out");
    let plugin_bin = e2e::workspace_binary("kubectl-booking");
    succeeds(&mut make(
        None,
        &[
            "krew-archive",
            &format!("ARCHIVE_BIN={}", plugin_bin.display()),
            &format!("KREW_OUT={}", out_dir.display()),
        ],
    ));
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let archive_name = format!(
        "kubectl-booking_{version}_{}_{arch}.tar.gz",
        std::env::consts::OS
    );
    let archive = out_dir.join(&archive_name);

    // The archive: the binary, LICENSE and README at its top level.
    let listing = run(Command::new("tar").arg("tzf").arg(&archive), "tar");
    let files: BTreeSet<&str> = listing.lines().collect();
    assert_eq!(
        files,
        BTreeSet::from(["kubectl-booking", "LICENSE", "README.md"])
    );

    // The manifest written for it: the committed one with this archive's sum and URI, and only
    // this platform.
    let written = booking_tests::read_yaml_documents(&out_dir.join("booking.yaml"));
    let committed = booking_tests::read_yaml_documents(
        &repo_root().join("controller/plugin/krew/booking.yaml"),
    );
    let (written, committed) = (&written[0], &committed[0]);
    assert_eq!(
        written["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(written["kind"], "Plugin");
    assert_eq!(written["metadata"]["name"], "booking");
    assert_eq!(written["spec"]["version"], version.as_str());
    for field in ["version", "homepage", "shortDescription", "description"] {
        assert_eq!(written["spec"][field], committed["spec"][field], "{field}");
    }
    let platforms = written["spec"]["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1, "{platforms:?}");
    let platform = &platforms[0];
    assert_eq!(
        platform["selector"]["matchLabels"]["os"],
        std::env::consts::OS
    );
    assert_eq!(platform["selector"]["matchLabels"]["arch"], arch);
    assert_eq!(platform["bin"], "kubectl-booking");
    assert_eq!(
        platform["uri"],
        format!(
            "https://github.com/kotaicode/resource-booking-operator/releases/download/{version}/{archive_name}"
        )
        .as_str()
    );
    let sum = run(Command::new("sha256sum").arg(&archive), "sha256sum");
    assert_eq!(
        platform["sha256"].as_str(),
        sum.split_whitespace().next(),
        "the manifest's sha256 is the archive's"
    );
    // The committed manifest lists the four release platforms, each with its archive's URI.
    let all: BTreeSet<String> = committed["spec"]["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let labels = &p["selector"]["matchLabels"];
            let (os, arch) = (
                labels["os"].as_str().unwrap(),
                labels["arch"].as_str().unwrap(),
            );
            assert!(
                p["uri"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("/kubectl-booking_{version}_{os}_{arch}.tar.gz")),
                "{p}"
            );
            assert_eq!(p["bin"], "kubectl-booking");
            format!("{os}/{arch}")
        })
        .collect();
    assert_eq!(
        all,
        BTreeSet::from(
            ["darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"].map(String::from)
        )
    );

    // The real krew installs it into a root of the test's own, and the real kubectl finds it as
    // `kubectl booking`.
    let krew_root = dir.join("krew-root");
    let krew_cmd = || {
        let mut c = Command::new(krew());
        c.env("KREW_ROOT", &krew_root)
            .env("KREW_NO_UPGRADE_CHECK", "1")
            .env("KUBECONFIG", "/dev/null");
        c
    };
    // krew checks the sums: the committed manifest's are filled only at release.
    let err = fails(krew_cmd().args([
        "install",
        &format!(
            "--manifest={}",
            repo_root().join("controller/plugin/krew/booking.yaml").display()
        ),
        &format!("--archive={}", archive.display()),
    ]));
    assert!(err.contains("sha256"), "{err}");
    succeeds(krew_cmd().args([
        "install",
        &format!("--manifest={}", out_dir.join("booking.yaml").display()),
        &format!("--archive={}", archive.display()),
    ]));
    // krew's receipt of the installed plugin.
    let receipt = booking_tests::read_yaml_documents(&krew_root.join("receipts/booking.yaml"));
    assert_eq!(
        receipt[0]["spec"]["version"],
        version.as_str(),
        "{receipt:?}"
    );
    let path = format!(
        "{}:{}",
        krew_root.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut kubectl = kubectl_cmd();
    kubectl.env("PATH", &path);
    let plugins = succeeds(kubectl.args(["plugin", "list"]));
    assert!(
        plugins.contains(&krew_root.join("bin/kubectl-booking").display().to_string()),
        "{plugins}"
    );
    let mut kubectl = kubectl_cmd();
    kubectl.env("PATH", &path);
    let help = succeeds(kubectl.args(["booking", "--help"]));
    assert!(help.contains("Usage: kubectl booking"), "{help}");
    for command in ["instances", "manage", "tag", "status", "book"] {
        assert!(help.contains(command), "{command}: {help}");
    }
}
