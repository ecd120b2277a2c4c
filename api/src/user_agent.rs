//! The User-Agent our binaries send to API servers, in client-go's form
//! (`<binary>/<version> (<os>/<arch>)`; client-go appends ` kubernetes/<commit>`, we have no
//! Kubernetes commit to name). API server audit logs, the sandbox's request record and
//! `managedFields` tooling then tell the components apart.

/// `<binary>/<version> (<os>/<arch>)`, with Go's names for the operating system and architecture
/// (`linux/amd64`, `darwin/arm64`), so log queries written for Go components match.
#[must_use]
pub fn user_agent(binary: &str, version: &str) -> String {
    format!("{binary}/{version} ({}/{})", go_os(), go_arch())
}

fn go_os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    }
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_binary_version_and_platform_like_client_go() {
        let agent = user_agent("machine-controller-manager", "0.4.1");
        let (head, platform) = agent.split_once(' ').unwrap_or_default();
        assert_eq!(head, "machine-controller-manager/0.4.1");
        let platform = platform.trim_start_matches('(').trim_end_matches(')');
        let (os, arch) = platform.split_once('/').unwrap_or_default();
        assert!(!os.is_empty() && !arch.is_empty(), "{agent}");
        assert_ne!(arch, "x86_64", "Go's architecture names: {agent}");
        assert_ne!(arch, "aarch64", "Go's architecture names: {agent}");
        // A header value: visible ASCII and spaces only.
        assert!(
            agent.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
            "{agent}"
        );
    }
}
