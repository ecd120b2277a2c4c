//! Conversions between the served versions of `machine.sapcloud.io` through the unversioned hub
//! ([`mcm_api::internal`]), and `ConversionReview` handling for the CRD conversion webhook.
//!
//! - [`spoke`]: pure, infallible conversions of typed objects between each version and the hub.
//!   Fields `v1beta1` cannot hold survive in the `machine.sapcloud.io/conversion-data`
//!   annotation, so every round trip is lossless.
//! - [`review`]: converts the JSON objects of a `ConversionReview`, keeping their order and
//!   changing nothing in `metadata` but labels and annotations.

pub mod review;
pub mod spoke;

pub use review::{ConversionError, convert_object, convert_review};
pub use spoke::{Hub, Spoke};
