//! Executes the hot update (issue item 5, docs/behaviour.md#hot-update) planned by
//! [`plan::hot_update::plan_hot_update`]: GetCapabilities once per controller, the
//! last-applied-providerspec annotation, the `Update`/`Processing` intent before UpdateMachine,
//! and a warning event (once per machine and class version) when a change needs a new class.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use jiff::Timestamp;
use mcm_api::v1alpha1::Machine;

use super::driver::{provider_of, timed};
use super::{ClassContext, MachineController, StepFlow, writes};
use crate::platform::error::ApiError;
use mcm_decisions::machine as plan;
use mcm_decisions::machine::hot_update::{
    HotUpdateInput, HotUpdateStep, LAST_APPLIED_PROVIDER_SPEC,
};
use mcm_decisions::vocabulary::{DriverError, Retry, name_of};

impl MachineController {
    /// The provider's hot-updatable paths (asked once; a failed GetCapabilities is asked again
    /// next time).
    async fn hot_paths(&self) -> Option<Vec<String>> {
        if let Some(paths) = self.hot_paths.get() {
            return Some(paths.clone());
        }
        match timed(
            &self.context,
            "",
            "GetCapabilities",
            self.context.driver.get_capabilities(),
        )
        .await
        {
            Ok(capabilities) => {
                let paths = capabilities.hot_updatable_paths;
                let _ = self.hot_paths.set(paths.clone());
                Some(paths)
            }
            Err(error) => {
                tracing::info!(%error, "GetCapabilities failed; hot updates wait");
                None
            }
        }
    }

    /// The hot-update step of one machine.
    pub(crate) async fn hot_update(
        &self,
        machine: &mut Machine,
        class: &ClassContext,
        now: Timestamp,
    ) -> Result<StepFlow, ApiError> {
        let name = name_of(machine).to_owned();
        let Some(hot_paths) = self.hot_paths().await else {
            return Ok(ControlFlow::Continue(Some(Retry::Medium)));
        };
        let mut intent_recorded = false;
        let mut update = None;
        loop {
            let step = plan::hot_update::plan_hot_update(&HotUpdateInput {
                machine,
                provider_spec: &class.class.provider_spec,
                hot_paths: &hot_paths,
                intent_recorded,
                update: update.as_ref(),
                now,
            });
            match step {
                HotUpdateStep::Nothing => return Ok(ControlFlow::Continue(None)),
                HotUpdateStep::InitialiseAnnotation { annotation, event } => {
                    if let Some(event) = event {
                        self.event(machine, &event);
                    }
                    *machine = writes::set_machine_annotations(
                        &self.context,
                        machine,
                        &BTreeMap::from([(
                            LAST_APPLIED_PROVIDER_SPEC.to_owned(),
                            Some(annotation),
                        )]),
                    )
                    .await?;
                    return Ok(ControlFlow::Continue(None));
                }
                HotUpdateStep::NewClassNeeded(event) => {
                    let version = class
                        .class
                        .metadata
                        .resource_version
                        .clone()
                        .unwrap_or_default();
                    let first = self
                        .cold_change_warned
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .insert((name.clone(), version));
                    if first {
                        tracing::warn!(machine = %name, message = %event.message, "providerSpec change is not hot-updatable");
                        self.event(machine, &event);
                    }
                    return Ok(ControlFlow::Continue(None));
                }
                HotUpdateStep::RecordIntent(write) => {
                    *machine = writes::write_status(&self.context, machine, &write, now).await?;
                    intent_recorded = true;
                }
                HotUpdateStep::CallUpdateMachine { last_applied } => {
                    let provider_id = machine.spec.provider_id.clone().unwrap_or_default();
                    tracing::info!(machine = %name, %provider_id, "calling UpdateMachine");
                    let result = timed(
                        &self.context,
                        provider_of(&class.class),
                        "UpdateMachine",
                        self.context.driver.update_machine(
                            &provider_id,
                            &last_applied,
                            &class.class,
                            &class.secret,
                            Some(machine),
                        ),
                    )
                    .await;
                    update = Some(result.map_err(DriverError::Coded));
                }
                HotUpdateStep::Finish {
                    annotation,
                    status,
                    retry,
                    events,
                } => {
                    self.events(machine, &events);
                    if let Some(annotation) = annotation {
                        // The VM is updated: its record must not be lost to a concurrent write of
                        // the Machine (a retry on a lagging cache would see nothing in flight).
                        *machine = writes::set_machine_annotations_reread_on_conflict(
                            &self.context,
                            machine,
                            &BTreeMap::from([(
                                LAST_APPLIED_PROVIDER_SPEC.to_owned(),
                                Some(annotation),
                            )]),
                        )
                        .await?;
                    }
                    *machine = writes::write_status(&self.context, machine, &status, now).await?;
                    return Ok(ControlFlow::Break(retry));
                }
            }
        }
    }
}
