//! Conversions between the served versions of the `machine.sapcloud.io` API.
//!
//! Filled by the webhooks issue: pure spoke/hub conversions and ConversionReview handling.
