//! The request verb, shared by the fault injector and the request record (neither imports the
//! other's module for it).

use serde::{Deserialize, Serialize};

/// kube-apiserver request verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// get
    Get,
    /// list
    List,
    /// watch
    Watch,
    /// create
    Create,
    /// update
    Update,
    /// patch
    Patch,
    /// delete
    Delete,
    /// deletecollection
    #[serde(rename = "deletecollection")]
    DeleteCollection,
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        })
    }
}
