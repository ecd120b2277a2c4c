//! Loopback ports for the processes a test starts.
//!
//! A port is found by binding port 0 and releasing it, so the child can bind it by number. The
//! kernel may hand the same just-released port out again, so a port is never given twice in one
//! test process: two admin endpoints of one system once got the same number and the second
//! process could not start.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Mutex, OnceLock};

use crate::error::{E2eError, Result};

/// How many times a just-handed-out port may come back before giving up.
const ATTEMPTS: usize = 64;

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A free loopback port that this test process has not handed out before.
pub fn free_port() -> Result<SocketAddr> {
    for _ in 0..ATTEMPTS {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(E2eError::io("bind a free port on", "127.0.0.1"))?;
        let address = listener
            .local_addr()
            .map_err(E2eError::io("read the address of", "127.0.0.1"))?;
        // A poisoned set is still a valid set of numbers.
        let mut ports = handed_out()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ports.insert(address.port()) {
            return Ok(address);
        }
    }
    Err(E2eError::Assertion(format!(
        "no loopback port that was not handed out before, after {ATTEMPTS} attempts"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_never_handed_out_twice() {
        let mut seen = HashSet::new();
        for _ in 0..500 {
            let port = free_port().expect("a free port").port();
            assert!(seen.insert(port), "port {port} was handed out twice");
        }
    }
}
