//! Memory shared with consumers: registered regions by STag with their protection domains
//! and posted buffers ([`registry`]; the mapping itself is `mpa_stack::region`), and the
//! subscribers' completion rings ([`completions`]).

pub mod completions;
pub(crate) mod registry;
