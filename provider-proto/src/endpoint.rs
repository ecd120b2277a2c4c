//! Driver endpoints: `unix:///path/to.sock` or `tcp://host:port` (also bare `host:port`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a driver listens / a client connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket path.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

/// An endpoint text that is neither `unix://<path>` nor `tcp://<ip>:<port>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid driver endpoint {input:?}: {reason} (expected unix:///path/to.sock or tcp://127.0.0.1:port)"
)]
pub struct EndpointError {
    /// The text given.
    pub input: String,
    /// Why it was refused.
    pub reason: String,
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |reason: &str| EndpointError {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = input.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(error("the socket path is empty"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let address = input
            .strip_prefix("tcp://")
            .or_else(|| input.strip_prefix("http://"))
            .unwrap_or(input);
        address
            .parse::<SocketAddr>()
            .map(Endpoint::Tcp)
            .map_err(|parse| error(&format!("not an IP:port address ({parse})")))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp(address) => write!(f, "tcp://{address}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_unix_and_tcp_forms() {
        assert_eq!(
            "unix:///run/mcm/driver.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/run/mcm/driver.sock".into())
        );
        let tcp = Endpoint::Tcp("127.0.0.1:7000".parse().unwrap());
        assert_eq!("tcp://127.0.0.1:7000".parse::<Endpoint>().unwrap(), tcp);
        assert_eq!("127.0.0.1:7000".parse::<Endpoint>().unwrap(), tcp);
        assert_eq!(tcp.to_string(), "tcp://127.0.0.1:7000");
    }

    #[test]
    fn refuses_malformed_endpoints() {
        for bad in ["unix://", "tcp://localhost", "nonsense", ""] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }
}
