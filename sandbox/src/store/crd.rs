//! The types CRDs serve: registering a CRD's type and schema validators (and setting it
//! Established), and removing them with the CRD.

use super::meta::{meta_str, now_rfc3339};
use super::{Store, Table};
use crate::resources;
use crate::schema::SchemaValidator;
use serde_json::{Value, json};
use std::sync::Arc;

impl Store {
    /// Registers (or refreshes) the type served by a CRD and sets its Established condition.
    pub(super) fn crd_changed(&self, crd: &Arc<Value>) -> Option<Arc<Value>> {
        let def = match resources::from_crd(crd) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "CRD not served");
                return None;
            }
        };
        let gr = (def.group.clone(), def.plural.clone());
        {
            let mut st = self.write();
            for (v, info) in &def.crd_versions {
                let key = (def.group.clone(), def.plural.clone(), v.clone());
                match info.schema.as_ref().map(SchemaValidator::new) {
                    Some(Ok(val)) => {
                        st.validators.insert(key, Arc::new(val));
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, version = %v, "CRD schema not usable for validation");
                        st.validators.remove(&key);
                    }
                    None => {
                        st.validators.remove(&key);
                    }
                }
            }
            st.defs.insert(gr.clone(), Arc::new(def.clone()));
            let limit = self.history_limit;
            st.tables.entry(gr).or_insert_with(|| Table::new(limit));
        }
        let established = crd
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Established")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        if established {
            return None;
        }
        let now = now_rfc3339();
        let mut updated = (**crd).clone();
        updated["status"] = json!({
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
            ],
            "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
            "storedVersions": [def.storage_version]
        });
        let name = meta_str(crd, "name").unwrap_or_default().to_string();
        self.update(
            &(
                "apiextensions.k8s.io".into(),
                "customresourcedefinitions".into(),
            ),
            "",
            &name,
            updated,
            None,
            false,
        )
        .ok()
    }

    pub(super) fn crd_removed(&self, crd: &Value) {
        if let Ok(def) = resources::from_crd(crd) {
            let mut st = self.write();
            let gr = (def.group.clone(), def.plural.clone());
            st.defs.remove(&gr);
            st.tables.remove(&gr);
            st.validators
                .retain(|(g, p, _), _| !(g == &def.group && p == &def.plural));
        }
    }
}
