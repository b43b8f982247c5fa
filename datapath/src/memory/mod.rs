//! Memory shared with consumers: registered regions by STag with their protection domains
//! and posted buffers (`registry`; the mapping itself is `mpa_stack::region`), and the
//! subscribers' completion rings ([`completions`]).

#![forbid(unsafe_code)]

pub mod completions;
pub(crate) mod registry;
pub mod streaming;
