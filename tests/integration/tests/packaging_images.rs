//! The Dockerfiles, checked statically (no Docker engine here): multi-stage builds of the
//! workspace's binaries onto pinned, shell-less, non-root images whose UID the manifests run as.
//! Helpers: [`booking_tests::packaging`].

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use booking_tests::packaging::*;
use booking_tests::repo_root;
use serde_json::Value;

/// The FROM images of a Dockerfile with `${ARG}` defaults substituted, stage by stage.
fn dockerfile_stages(text: &str) -> Vec<(String, Vec<String>)> {
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    // Join continuation lines, drop comments.
    let joined = text.replace("\\\n", " ");
    for line in joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (instr, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        match instr.to_ascii_uppercase().as_str() {
            "ARG" if stages.is_empty() => {
                if let Some((k, v)) = rest.trim().split_once('=') {
                    args.insert(k.to_owned(), v.trim_matches('"').to_owned());
                }
            }
            "FROM" => {
                let mut image = rest.split_whitespace().next().unwrap().to_owned();
                for (k, v) in &args {
                    image = image
                        .replace(&format!("${{{k}}}"), v)
                        .replace(&format!("${k}"), v);
                }
                stages.push((image, Vec::new()));
            }
            _ => {
                if let Some(s) = stages.last_mut() {
                    s.1.push(line.to_owned());
                }
            }
        }
    }
    stages
}

#[test]
fn dockerfiles_build_the_workspace_binaries_onto_pinned_non_root_shell_less_images() {
    let metadata: Value = serde_json::from_str(&run(
        Command::new(env!("CARGO")).current_dir(repo_root()).args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ]),
        "cargo",
    ))
    .unwrap();
    let bins: BTreeSet<(String, String)> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["kind"][0] == "bin")
                .map(move |t| {
                    (
                        p["name"].as_str().unwrap().to_owned(),
                        t["name"].as_str().unwrap().to_owned(),
                    )
                })
        })
        .collect();
    for name in ["booking-controller", "booking-webhook"] {
        let file = format!("Dockerfile.{}", name.trim_start_matches("booking-"));
        let text = std::fs::read_to_string(repo_root().join(&file)).unwrap();
        let stages = dockerfile_stages(&text);
        assert!(stages.len() >= 2, "{file} is multi-stage");
        for (image, _) in &stages {
            let (repo, pin) = match image.split_once('@') {
                Some((repo, digest)) => {
                    assert!(
                        digest.starts_with("sha256:") && digest.len() == 71,
                        "{file}: digest {digest}"
                    );
                    (repo, "digest")
                }
                None => (image.as_str(), ""),
            };
            let tag = repo
                .rsplit_once(':')
                .map(|(_, t)| t)
                .filter(|t| !t.contains('/'));
            assert!(
                pin == "digest" || tag.is_some(),
                "{file}: {image} is pinned by tag or digest"
            );
            assert!(
                tag != Some("latest") && !image.contains(":latest"),
                "{file}: no latest ({image})"
            );
        }
        let all = stages
            .iter()
            .flat_map(|s| &s.1)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        let build = format!("cargo build --locked --release -p {name}");
        assert!(all.contains(&build), "{file} runs `{build}`");
        assert!(
            bins.contains(&(name.to_owned(), name.to_owned())),
            "the workspace has package and binary {name}"
        );
        // The runtime stage: distroless (no shell, no debug variant) or scratch, non-root.
        let (runtime, lines) = stages.last().unwrap();
        assert!(
            (runtime.starts_with("gcr.io/distroless/") && !runtime.contains("debug"))
                || runtime == "scratch",
            "{file}: runtime {runtime} has no shell"
        );
        let user = lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("USER "))
            .unwrap_or_else(|| panic!("{file}: the runtime stage sets USER"));
        let uid = user.split(':').next().unwrap().trim();
        assert!(
            uid.parse::<u32>().is_ok_and(|u| u != 0),
            "{file}: USER {user} is a numeric non-root UID"
        );
        assert!(
            lines
                .iter()
                .any(|l| l == &format!("ENTRYPOINT [\"/usr/local/bin/{name}\"]")),
            "{file}: exec-form ENTRYPOINT (no shell to run a shell form)"
        );
        assert!(
            lines.iter().any(|l| l.contains(&format!(
                "COPY --from=build /out/{name} /usr/local/bin/{name}"
            ))),
            "{file}: copies the built binary"
        );
        for label in [
            "title",
            "description",
            "source",
            "licenses",
            "version",
            "revision",
        ] {
            assert!(
                text.contains(&format!("org.opencontainers.image.{label}=")),
                "{file}: OCI label {label}"
            );
        }
        // The image's UID is the one the manifests run as.
        let objects = base();
        let d = deployment(&objects, name);
        assert_eq!(
            pod_spec(&d).security_context.unwrap().run_as_user,
            Some(i64::from(uid.parse::<u32>().unwrap())),
            "{name}: manifests and image agree on the UID"
        );
    }
    let ignore = std::fs::read_to_string(repo_root().join(".dockerignore")).unwrap();
    for pattern in ["target/", ".git/", "certs/out/", "**/*.key"] {
        assert!(
            ignore.lines().any(|l| l.trim() == pattern),
            ".dockerignore excludes {pattern}"
        );
    }
}
