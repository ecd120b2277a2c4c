//! Writes the CRDs of `machine.sapcloud.io` as YAML, one file per CRD named like upstream
//! (`machine.sapcloud.io_machines.yaml`, ...), into the directory given as the first argument.
//!
//! Usage: `crdgen <dir> [--conversion-service <namespace>/<name>] [--conversion-path /convert]
//! [--conversion-port <port>]`, or `crdgen --chart <dir>`.
//!
//! Without `--conversion-service` the CRDs serve `v1alpha1` only. With it they serve `v1alpha1`
//! (storage) and `v1beta1` and carry the conversion stanza pointing at that Service (caBundle
//! left for injection).
//!
//! `--chart <dir>` writes both variants for the Helm chart (`make crds`): `<dir>/v1alpha1/` and
//! `<dir>/conversion/`. The chart's templates read them with `.Files.Get` (Helm never templates
//! its `crds/` folder, and whether the CRDs are installed and with which conversion stanza are
//! chart values) and overwrite the conversion Service reference with the release's webhook
//! Service, so the reference written here is only a placeholder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mcm_api::crd::ConversionWebhook;

const USAGE: &str = "usage: crdgen <output-directory> [--conversion-service <namespace>/<name>] [--conversion-path <path>] [--conversion-port <port>]\n       crdgen --chart <output-directory>";

/// Sub-folder of `--chart` output holding the `v1alpha1`-only CRDs.
const CHART_PLAIN_DIR: &str = "v1alpha1";
/// Sub-folder of `--chart` output holding the CRDs with `v1beta1` and the conversion stanza.
const CHART_CONVERSION_DIR: &str = "conversion";

/// What to write.
#[derive(Debug, PartialEq)]
enum Output {
    /// One variant into one directory.
    Single(PathBuf, Option<ConversionWebhook>),
    /// Both variants into sub-folders of the chart's CRD source directory.
    Chart(PathBuf),
}

/// The conversion webhook reference written into the chart's conversion variant; the templates
/// replace namespace, name, port and path with the release's values.
fn chart_placeholder_webhook() -> ConversionWebhook {
    ConversionWebhook {
        service_namespace: "machine-controller-manager".to_owned(),
        service_name: "machine-controller-manager-webhook".to_owned(),
        path: "/convert".to_owned(),
        port: Some(443),
        ca_bundle: None,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let output = match parse(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("crdgen: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let jobs = match &output {
        Output::Single(dir, webhook) => vec![(dir.clone(), webhook.clone())],
        Output::Chart(dir) => vec![
            (dir.join(CHART_PLAIN_DIR), None),
            (
                dir.join(CHART_CONVERSION_DIR),
                Some(chart_placeholder_webhook()),
            ),
        ],
    };
    for (dir, webhook) in jobs {
        match run(&dir, webhook.as_ref()) {
            Ok(count) => eprintln!("crdgen: wrote {count} CRD(s) to {}", dir.display()),
            Err(message) => {
                eprintln!("crdgen: {message}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn parse(args: &[String]) -> Result<Output, String> {
    let mut dir = None;
    let mut chart = false;
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
            "--chart" => chart = true,
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
    if chart {
        if service.is_some() || port.is_some() || path != "/convert" {
            return Err(
                "--chart writes both variants; the conversion options do not apply".to_owned(),
            );
        }
        return Ok(Output::Chart(dir));
    }
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
    Ok(Output::Single(dir, webhook))
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
        assert_eq!(
            parse(&args(&["out"])).unwrap(),
            Output::Single(PathBuf::from("out"), None)
        );
    }

    #[test]
    fn chart_mode_takes_only_the_directory() {
        assert_eq!(
            parse(&args(&["--chart", "files/crds"])).unwrap(),
            Output::Chart(PathBuf::from("files/crds"))
        );
        assert!(parse(&args(&["--chart", "out", "--conversion-service", "a/b"])).is_err());
        assert!(parse(&args(&["--chart", "out", "--conversion-port", "443"])).is_err());
        assert!(parse(&args(&["--chart"])).is_err());
    }

    #[test]
    fn chart_mode_writes_both_variants() {
        // api has no tempfile dev-dependency: a per-process folder under the system temp dir.
        let dir = std::env::temp_dir().join(format!("crdgen-chart-{}", std::process::id()));
        let plain = dir.join(CHART_PLAIN_DIR);
        let conversion = dir.join(CHART_CONVERSION_DIR);
        assert_eq!(run(&plain, None).unwrap(), 4);
        assert_eq!(
            run(&conversion, Some(&chart_placeholder_webhook())).unwrap(),
            4
        );
        let machines = "machine.sapcloud.io_machines.yaml";
        let plain = std::fs::read_to_string(plain.join(machines)).unwrap();
        let conversion = std::fs::read_to_string(conversion.join(machines)).unwrap();
        assert!(!plain.contains("conversion:") && !plain.contains("name: v1beta1"));
        assert!(conversion.contains("strategy: Webhook") && conversion.contains("name: v1beta1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn conversion_options_build_the_webhook() {
        let Output::Single(_, Some(webhook)) = parse(&args(&[
            "out",
            "--conversion-service",
            "garden/mcm-webhook",
            "--conversion-port",
            "9443",
        ]))
        .unwrap() else {
            panic!("expected a single output with a webhook");
        };
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
