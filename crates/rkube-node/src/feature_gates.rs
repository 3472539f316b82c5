//! `--feature-gates` (kubelet syntax: `Name=true,Other=false`).
//!
//! Known gates and their rkube defaults: `EventedPLEG` (KEP-3386) — on in rkube (off by default
//! upstream, where it is still alpha/beta). Unknown names are rejected, as kubelet does.

use std::collections::BTreeMap;

/// Name of the evented PLEG gate.
pub const EVENTED_PLEG: &str = "EventedPLEG";

/// Errors of `--feature-gates` parsing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FeatureGateError {
    /// Not `Name=bool`.
    #[error("missing bool value for {0}")]
    Malformed(String),
    /// The value is not a bool.
    #[error("invalid value of {name}={value}, err: not a bool")]
    NotBool {
        /// Gate.
        name: String,
        /// Value given.
        value: String,
    },
    /// Not a gate rkube knows.
    #[error("unrecognized feature gate: {0}")]
    Unknown(String),
}

/// Resolved gates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    gates: BTreeMap<&'static str, bool>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self { gates: BTreeMap::from([(EVENTED_PLEG, true)]) }
    }
}

impl FeatureGates {
    /// Defaults overridden by a `--feature-gates` value (empty string: defaults).
    pub fn parse(spec: &str) -> Result<Self, FeatureGateError> {
        let mut gates = Self::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item.split_once('=').ok_or_else(|| FeatureGateError::Malformed(item.to_string()))?;
            let (name, value) = (name.trim(), value.trim());
            let on = match value.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(FeatureGateError::NotBool { name: name.into(), value: value.into() }),
            };
            let key = gates.gates.keys().copied().find(|k| *k == name).ok_or_else(|| FeatureGateError::Unknown(name.into()))?;
            gates.gates.insert(key, on);
        }
        Ok(gates)
    }

    /// Whether a gate is on (unknown gates are off).
    pub fn enabled(&self, name: &str) -> bool {
        self.gates.get(name).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evented_pleg_is_on_by_default_and_can_be_turned_off() {
        assert!(FeatureGates::parse("").expect("empty").enabled(EVENTED_PLEG));
        assert!(!FeatureGates::parse("EventedPLEG=false").expect("off").enabled(EVENTED_PLEG));
        assert!(FeatureGates::parse(" EventedPLEG=True ").expect("on").enabled(EVENTED_PLEG));
    }

    #[test]
    fn bad_gates_are_rejected_with_kubelet_messages() {
        assert_eq!(FeatureGates::parse("Nope=true"), Err(FeatureGateError::Unknown("Nope".into())));
        assert_eq!(FeatureGates::parse("EventedPLEG"), Err(FeatureGateError::Malformed("EventedPLEG".into())));
        assert!(matches!(FeatureGates::parse("EventedPLEG=yes"), Err(FeatureGateError::NotBool { .. })));
    }
}
