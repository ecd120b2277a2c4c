//! Writes the CRDs of `machine.sapcloud.io` as YAML, one file per CRD named like upstream
//! (`machine.sapcloud.io_machines.yaml`, ...), into the directory given as the first argument.
//!
//! Usage: `crdgen <dir> [--conversion-service <namespace>/<name>] [--conversion-path /convert]
//! [--conversion-port <port>]`.
//!
//! Without `--conversion-service` the CRDs serve `v1alpha1` only (what the chart's `crds/` folder
//! holds, `make crds`). With it they serve `v1alpha1` (storage) and `v1beta1` and carry the
//! conversion stanza pointing at that Service (caBundle left for injection).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mcm_api::crd::ConversionWebhook;

const USAGE: &str = "usage: crdgen <output-directory> [--conversion-service <namespace>/<name>] [--conversion-path <path>] [--conversion-port <port>]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, webhook) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("crdgen: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&dir, webhook.as_ref()) {
        Ok(count) => {
            eprintln!("crdgen: wrote {count} CRD(s) to {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("crdgen: {message}");
            ExitCode::FAILURE
        }
    }
}

fn parse(args: &[String]) -> Result<(PathBuf, Option<ConversionWebhook>), String> {
    let mut dir = None;
    let mut service = None;
    let mut path = "/convert".to_owned();
    let mut port = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--conversion-service" => service = Some(value(arg)?),
            "--conversion-path" => path = value(arg)?,
            "--conversion-port" => {
                let text = value(arg)?;
                port = Some(
                    text.parse::<i32>()
                        .map_err(|e| format!("--conversion-port {text}: {e}"))?,
                );
            }
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            other if dir.is_none() => dir = Some(PathBuf::from(other)),
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    let dir = dir.ok_or("missing output directory")?;
    let webhook = service
        .map(|service| {
            let (namespace, name) = service
                .split_once('/')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .ok_or_else(|| {
                    format!("--conversion-service {service}: expected <namespace>/<name>")
                })?;
            Ok::<_, String>(ConversionWebhook {
                service_namespace: namespace.to_owned(),
                service_name: name.to_owned(),
                path: path.clone(),
                port,
                ca_bundle: None,
            })
        })
        .transpose()?;
    Ok((dir, webhook))
}

fn run(dir: &Path, webhook: Option<&ConversionWebhook>) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let crds = match webhook {
        Some(webhook) => mcm_api::crd::all_with_conversion(webhook),
        None => mcm_api::crd::all(),
    }
    .map_err(|e| e.to_string())?;
    for (file, crd) in &crds {
        let yaml = mcm_api::crd::to_yaml(crd).map_err(|e| e.to_string())?;
        let path = dir.join(file);
        std::fs::write(&path, yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(crds.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn plain_invocation_keeps_the_single_version_contract() {
        let (dir, webhook) = parse(&args(&["out"])).unwrap();
        assert_eq!(dir, PathBuf::from("out"));
        assert!(webhook.is_none());
    }

    #[test]
    fn conversion_options_build_the_webhook() {
        let (_, webhook) = parse(&args(&[
            "out",
            "--conversion-service",
            "garden/mcm-webhook",
            "--conversion-port",
            "9443",
        ]))
        .unwrap();
        let webhook = webhook.unwrap();
        assert_eq!(webhook.service_namespace, "garden");
        assert_eq!(webhook.service_name, "mcm-webhook");
        assert_eq!(webhook.path, "/convert");
        assert_eq!(webhook.port, Some(9443));
    }

    #[test]
    fn bad_options_are_rejected() {
        for bad in [
            &["out", "--conversion-service", "no-slash"][..],
            &["out", "--conversion-service"],
            &[
                "out",
                "--conversion-port",
                "x",
                "--conversion-service",
                "a/b",
            ],
            &["out", "--frobnicate"],
            &["out", "second"],
            &[],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
