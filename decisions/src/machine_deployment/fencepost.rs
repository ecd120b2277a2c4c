//! Surge and unavailability arithmetic (docs/behaviour.md#revisions `MaxSurge`, `MaxUnavailable`,
//! `ResolveFenceposts`): maxSurge rounds **up**, maxUnavailable rounds **down**, both as a
//! percentage of `spec.replicas`; if both resolve to 0, one machine may be unavailable.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::v1alpha1::{
    MachineDeployment, MachineDeploymentStrategyType, OrchestrationType, UpdateConfiguration,
};

/// Why a surge or unavailability value cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FencepostError {
    /// Neither an integer nor `<n>%`.
    #[error("invalid value for IntOrString: {0:?}: not an integer or a percentage")]
    Invalid(String),
    /// The value is absent.
    #[error("{0} is not set")]
    Missing(&'static str),
    /// The scaled value does not fit in an int32.
    #[error("{0} does not fit in an int32")]
    OutOfRange(&'static str),
}

/// Resolves an int-or-percent against `total`, rounding percentages up or down.
///
/// # Errors
/// A string that is not `<integer>%`, or a result outside int32.
pub fn scaled_value(
    value: &IntOrString,
    total: i32,
    round_up: bool,
) -> Result<i32, FencepostError> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| FencepostError::Invalid(s.clone()))?;
            let product = pct * i64::from(total);
            let v = if round_up {
                product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0)
            } else {
                product.div_euclid(100)
            };
            i32::try_from(v).map_err(|_| FencepostError::OutOfRange("value"))
        }
    }
}

/// `(maxSurge, maxUnavailable)` for `desired` replicas (`ResolveFenceposts`).
///
/// # Errors
/// A missing or malformed value.
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), FencepostError> {
    let surge = scaled_value(
        max_surge.ok_or(FencepostError::Missing("maxSurge"))?,
        desired,
        true,
    )?;
    let unavailable = scaled_value(
        max_unavailable.ok_or(FencepostError::Missing("maxUnavailable"))?,
        desired,
        false,
    )?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

fn strategy_type(md: &MachineDeployment) -> Option<&MachineDeploymentStrategyType> {
    md.spec.strategy.as_ref()?.type_.as_ref()
}

/// The surge/unavailability configuration of the deployment's strategy (rolling or in-place).
#[must_use]
pub fn update_configuration(md: &MachineDeployment) -> Option<&UpdateConfiguration> {
    let strategy = md.spec.strategy.as_ref()?;
    match strategy.type_.as_ref()? {
        MachineDeploymentStrategyType::RollingUpdate => strategy
            .rolling_update
            .as_ref()
            .map(|r| &r.update_configuration),
        MachineDeploymentStrategyType::InPlaceUpdate => strategy
            .in_place_update
            .as_ref()
            .map(|r| &r.update_configuration),
        _ => None,
    }
}

/// `spec.replicas`, absent meaning 0.
#[must_use]
pub fn replicas(md: &MachineDeployment) -> i32 {
    md.spec.replicas.unwrap_or(0)
}

fn is_manual_in_place(md: &MachineDeployment) -> bool {
    md.spec
        .strategy
        .as_ref()
        .and_then(|s| s.in_place_update.as_ref())
        .and_then(|i| i.orchestration_type.as_ref())
        == Some(&OrchestrationType::Manual)
}

/// The in-place strategy's maxSurge resolved against `spec.replicas` (rounding up), 0 when
/// absent or malformed (validation rejects those before planning).
#[must_use]
pub fn in_place_surge(md: &MachineDeployment) -> i32 {
    md.spec
        .strategy
        .as_ref()
        .and_then(|s| s.in_place_update.as_ref())
        .and_then(|i| i.update_configuration.max_surge.as_ref())
        .map_or(0, |v: &IntOrString| {
            scaled_value(v, replicas(md), true).unwrap_or(0)
        })
}

/// `MaxSurge(md)`: the resolved surge for RollingUpdate, 0 for other strategies.
///
/// # Errors
/// A missing or malformed value.
pub fn max_surge(md: &MachineDeployment) -> Result<i32, FencepostError> {
    if strategy_type(md) != Some(&MachineDeploymentStrategyType::RollingUpdate) {
        return Ok(0);
    }
    let cfg = update_configuration(md).ok_or(FencepostError::Missing("rollingUpdate"))?;
    Ok(resolve_fenceposts(
        cfg.max_surge.as_ref(),
        cfg.max_unavailable.as_ref(),
        replicas(md),
    )?
    .0)
}

/// `MaxUnavailable(md)`: for RollingUpdate and InPlaceUpdate the resolved value capped at
/// `spec.replicas` (maxSurge counted as 0 for manual in-place), otherwise (or with 0 replicas) 0.
///
/// # Errors
/// A missing or malformed value.
pub fn max_unavailable(md: &MachineDeployment) -> Result<i32, FencepostError> {
    let applies = matches!(
        strategy_type(md),
        Some(
            MachineDeploymentStrategyType::RollingUpdate
                | MachineDeploymentStrategyType::InPlaceUpdate
        )
    );
    if !applies || replicas(md) == 0 {
        return Ok(0);
    }
    let cfg = update_configuration(md).ok_or(FencepostError::Missing("update configuration"))?;
    let zero = IntOrString::Int(0);
    let surge = if is_manual_in_place(md) {
        Some(&zero)
    } else {
        cfg.max_surge.as_ref()
    };
    let (_, unavailable) = resolve_fenceposts(surge, cfg.max_unavailable.as_ref(), replicas(md))?;
    Ok(unavailable.min(replicas(md)))
}

/// The surge used by the overshooting safety controller: the rolling configuration's maxSurge if
/// present, else the in-place one's, resolved against `spec.replicas` rounding up; `None` when
/// neither exists (Recreate), which upstream turned into an abort of the whole check (docs/behaviour.md#q12).
///
/// # Errors
/// A malformed value.
pub fn safety_surge(md: &MachineDeployment) -> Result<Option<i32>, FencepostError> {
    let strategy = md.spec.strategy.as_ref();
    let surge = strategy
        .and_then(|s| s.rolling_update.as_ref())
        .map(|r| r.update_configuration.max_surge.as_ref())
        .or_else(|| {
            strategy
                .and_then(|s| s.in_place_update.as_ref())
                .map(|i| i.update_configuration.max_surge.as_ref())
        });
    match surge {
        None | Some(None) => Ok(None),
        Some(Some(v)) => scaled_value(v, replicas(md), true).map(Some),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::{
        MachineDeploymentSpec, MachineDeploymentStrategy, RollingUpdateMachineDeployment,
    };

    fn ios(s: &str) -> IntOrString {
        s.parse::<i32>()
            .map_or_else(|_| IntOrString::String(s.to_owned()), IntOrString::Int)
    }

    #[test]
    fn fencepost_table() {
        // (surge, unavailable, desired) → (surge, unavailable)
        let cases = [
            ("25%", "25%", 10, (3, 2)),
            ("25%", "25%", 4, (1, 1)),
            ("1", "0", 3, (1, 0)),
            ("0", "0", 3, (0, 1)),
            ("0%", "0%", 0, (0, 1)),
            ("10%", "10%", 1, (1, 0)),
            ("100%", "100%", 7, (7, 7)),
            ("33%", "33%", 10, (4, 3)),
            ("3", "2", 0, (3, 2)),
        ];
        for (s, u, d, want) in cases {
            assert_eq!(
                resolve_fenceposts(Some(&ios(s)), Some(&ios(u)), d).unwrap(),
                want,
                "surge {s} unavailable {u} desired {d}"
            );
        }
    }

    #[test]
    fn malformed_values_are_errors() {
        assert!(resolve_fenceposts(Some(&ios("abc")), Some(&ios("1")), 3).is_err());
        assert!(resolve_fenceposts(Some(&ios("5")), None, 3).is_err());
        assert!(scaled_value(&ios("%"), 3, true).is_err());
        assert!(scaled_value(&ios("99999999999%"), 3, true).is_err());
    }

    fn md(kind: &str, surge: &str, unavailable: &str, replicas: i32) -> MachineDeployment {
        MachineDeployment::new(
            "md",
            MachineDeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(MachineDeploymentStrategy {
                    type_: Some(kind.into()),
                    rolling_update: Some(RollingUpdateMachineDeployment {
                        update_configuration: UpdateConfiguration {
                            max_surge: Some(ios(surge)),
                            max_unavailable: Some(ios(unavailable)),
                        },
                    }),
                    in_place_update: None,
                }),
                ..MachineDeploymentSpec::default()
            },
        )
    }

    #[test]
    fn strategy_dependent_limits() {
        assert_eq!(max_surge(&md("RollingUpdate", "2", "1", 5)).unwrap(), 2);
        assert_eq!(
            max_unavailable(&md("RollingUpdate", "2", "9", 5)).unwrap(),
            5
        );
        assert_eq!(
            max_unavailable(&md("RollingUpdate", "2", "1", 0)).unwrap(),
            0
        );
        assert_eq!(max_surge(&md("Recreate", "2", "1", 5)).unwrap(), 0);
        assert_eq!(max_unavailable(&md("Recreate", "2", "1", 5)).unwrap(), 0);
        assert_eq!(
            safety_surge(&md("RollingUpdate", "50%", "1", 3)).unwrap(),
            Some(2)
        );
        let mut recreate = md("Recreate", "1", "1", 3);
        recreate.spec.strategy.as_mut().unwrap().rolling_update = None;
        assert_eq!(safety_surge(&recreate).unwrap(), None);
    }
}
