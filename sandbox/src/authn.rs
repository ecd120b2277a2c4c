//! Authentication as kube-apiserver does it, for what our components and kubectl use: client
//! certificates signed by the sandbox CA (CN = user, O = groups), static bearer tokens and
//! ServiceAccount tokens issued through the TokenRequest subresource.

use crate::store::{GroupResource, Store};
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The token of the admin kubeconfig (`sandbox-admin`, group `system:masters`).
pub const ADMIN_TOKEN: &str = "sandbox-admin-token";
/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The superuser group: RBAC always allows it (kube's `system:masters`).
pub const MASTERS: &str = "system:masters";

/// An authenticated identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User name (`system:serviceaccount:<ns>:<name>` for ServiceAccounts).
    pub name: String,
    /// Groups, including `system:authenticated`.
    pub groups: Vec<String>,
}

impl User {
    /// A user in the given groups plus `system:authenticated`, as kube-apiserver adds it.
    pub fn new(name: impl Into<String>, groups: impl IntoIterator<Item = String>) -> Self {
        let mut groups: Vec<String> = groups.into_iter().collect();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_string());
        }
        User {
            name: name.into(),
            groups,
        }
    }

    /// The admin of the admin kubeconfig.
    pub fn admin() -> Self {
        User::new("sandbox-admin", [MASTERS.to_string()])
    }

    /// A ServiceAccount's identity as kube-apiserver builds it.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        User::new(
            format!("system:serviceaccount:{namespace}:{name}"),
            [
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
            ],
        )
    }

    /// Whether RBAC is bypassed for this user.
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}

/// The outcome of authenticating one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authn {
    /// Valid credentials.
    User(User),
    /// No credentials at all.
    Anonymous,
    /// Credentials that did not check out (kube answers 401 even where anonymous would pass).
    Invalid,
}

/// Errors of the token file parser.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// A line without the `token,user,uid` columns.
    #[error("line {line}: want token,user,uid[,\"group1,group2\"]")]
    Malformed {
        /// 1-based line number.
        line: usize,
    },
}

struct SaToken {
    namespace: String,
    name: String,
    uid: String,
}

/// Holds the credentials the sandbox accepts.
pub struct Authenticator {
    tokens: RwLock<HashMap<String, User>>,
    sa_tokens: RwLock<HashMap<String, SaToken>>,
    counter: AtomicU64,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").finish_non_exhaustive()
    }
}

impl Default for Authenticator {
    fn default() -> Self {
        let mut tokens = HashMap::new();
        tokens.insert(ADMIN_TOKEN.to_string(), User::admin());
        Authenticator {
            tokens: RwLock::new(tokens),
            sa_tokens: RwLock::new(HashMap::new()),
            counter: AtomicU64::new(0),
        }
    }
}

impl Authenticator {
    /// Accepts `token` as `user` from now on (kube's `--token-auth-file`).
    pub fn add_token(&self, token: impl Into<String>, user: User) {
        if let Ok(mut t) = self.tokens.write() {
            t.insert(token.into(), user);
        }
    }

    /// Reads kube's static token file format: `token,user,uid[,"group1,group2"]` per line.
    pub fn add_token_file(&self, text: &str) -> Result<usize, TokenFileError> {
        let mut n = 0;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut cols = line.splitn(4, ',');
            let (Some(token), Some(user), Some(_uid)) = (cols.next(), cols.next(), cols.next())
            else {
                return Err(TokenFileError::Malformed { line: i + 1 });
            };
            let groups = cols
                .next()
                .map(|g| {
                    g.trim_matches('"')
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            self.add_token(token.trim(), User::new(user.trim(), groups));
            n += 1;
        }
        Ok(n)
    }

    /// Issues a token for a ServiceAccount (the TokenRequest subresource). It stays valid while the
    /// ServiceAccount with this uid exists, as a bound token does while its owner lives.
    pub fn issue_sa_token(&self, namespace: &str, name: &str, uid: &str) -> String {
        // Not a JWT: clients treat tokens as opaque, and only this process verifies them.
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        let token = format!("sandbox-sa.{n}.{:016x}", h.finish());
        if let Ok(mut t) = self.sa_tokens.write() {
            t.insert(
                token.clone(),
                SaToken {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    uid: uid.to_string(),
                },
            );
        }
        token
    }

    /// Authenticates a request from its Authorization header and verified client certificate.
    pub fn authenticate(
        &self,
        store: &Store,
        authorization: Option<&str>,
        peer: Option<&User>,
    ) -> Authn {
        let Some(header) = authorization else {
            return match peer {
                Some(u) => Authn::User(u.clone()),
                None => Authn::Anonymous,
            };
        };
        let Some(token) = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
        else {
            return Authn::Invalid;
        };
        if let Some(u) = self.tokens.read().ok().and_then(|t| t.get(token).cloned()) {
            return Authn::User(u);
        }
        let sa = self.sa_tokens.read().ok().and_then(|t| {
            t.get(token)
                .map(|s| (s.namespace.clone(), s.name.clone(), s.uid.clone()))
        });
        if let Some((ns, name, uid)) = sa {
            let gr: GroupResource = (String::new(), "serviceaccounts".to_string());
            let alive = store
                .get(&gr, &ns, &name)
                .is_some_and(|o| o.pointer("/metadata/uid").and_then(Value::as_str) == Some(&uid));
            if alive {
                return Authn::User(User::service_account(&ns, &name));
            }
        }
        Authn::Invalid
    }
}

/// The user named by a verified client certificate: CN is the name, each O a group.
pub fn user_from_certificate(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect::<Vec<_>>();
    Some(User::new(name, groups))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn token_file_lines() {
        let a = Authenticator::default();
        let n = a
            .add_token_file("# c\nt1,alice,1,\"g1,g2\"\nt2,bob,2\n")
            .unwrap();
        assert_eq!(n, 2);
        let store = Store::new(10);
        let Authn::User(u) = a.authenticate(&store, Some("Bearer t1"), None) else {
            panic!("t1 rejected");
        };
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["g1", "g2", AUTHENTICATED]);
        assert_eq!(
            a.authenticate(&store, Some("Bearer nope"), None),
            Authn::Invalid
        );
        assert_eq!(a.authenticate(&store, None, None), Authn::Anonymous);
        assert!(a.add_token_file("onlytoken\n").is_err());
    }

    #[test]
    fn sa_token_dies_with_its_service_account() {
        let a = Authenticator::default();
        let store = Store::new(10);
        let t = a.issue_sa_token("ns", "sa", "uid-1");
        assert_eq!(
            a.authenticate(&store, Some(&format!("Bearer {t}")), None),
            Authn::Invalid
        );
    }
}
