//! Why a layer's builder refused its settings.

use std::fmt;

/// Why [`IdemLayerBuilder::build`](crate::IdemLayerBuilder::build) or
/// [`RetryLayerBuilder::build`](crate::RetryLayerBuilder::build) refused its settings; the
/// message names the rule, in words.
///
/// ```
/// use idem_tower::{ConfigError, RetryLayer};
/// use std::time::Duration;
///
/// let err = RetryLayer::builder().call_timeout(Duration::ZERO).build().unwrap_err();
/// assert!(matches!(err, ConfigError::Invalid(rule) if rule.contains("call_timeout")));
/// assert_eq!(
///     err.to_string(),
///     "invalid layer setting: call_timeout must be greater than zero (no attempt could be made)"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting is out of range; the text names the rule it broke.
    Invalid(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid(rule) => write!(f, "invalid layer setting: {rule}"),
        }
    }
}

impl std::error::Error for ConfigError {}
