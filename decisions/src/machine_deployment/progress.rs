//! Rollout progress (upstream `deployment_progress.go`, `syncRolloutStatus`): the status with
//! its Progressing and Available conditions, written when it changed, and the requeue for the
//! progress deadline.

use super::status;
use super::types::DeploymentAction;
use super::work::Work;

impl Work<'_> {
    pub(super) fn previous_status_complete(&self) -> bool {
        status::deployment_complete(&self.md, &self.original_status)
    }

    /// `syncRolloutStatus`.
    pub(super) fn rollout_status(&mut self) {
        let new = self.new.map(|n| self.sets[n].clone());
        let all = self.all_refs();
        let rs = status::rollout_status(
            &self.md,
            &all,
            new.as_ref(),
            self.max_unavailable,
            self.now(),
        );
        if status::status_update_required(&self.original_status, &rs.status) {
            self.actions
                .push(DeploymentAction::UpdateDeploymentStatus(Box::new(
                    rs.status,
                )));
        } else if let Some(retry) = rs.progress_check.retry() {
            self.requeue_after = self.requeue_after.min(retry);
        }
    }
}

#[cfg(test)]
mod tests;
