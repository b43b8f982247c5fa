//! libmpaxdp: mpa-xdp's application interface ([`mpa_app::Consumer`]) for C programs, shaped
//! like verbs and rdma_cm (docs/c-library.md maps every call; docs/verbs.md the Rust ones).
//! The header, `include/mpaxdp.h`, is generated from this crate.
//!
//! Handles are plain: a context pointer (`mpx_context *`, one connection to the datapath),
//! and numbers for what lives in it — protection domains, STags, CQs, listeners, connection
//! requests and connections. Every call returns [`MPX_OK`] or a negative error code, and a
//! failure leaves its message for [`mpx_last_error`] on the calling thread. No panic crosses
//! the ABI: one inside the library is caught and returned as [`MPX_ERR_INTERNAL`].

// The C names of the ABI (mpx_context, mpx_wc, ...) are the header's.
#![allow(non_camel_case_types)]

mod args;
mod cm;
mod context;
mod errors;
mod work;

pub use cm::*;
pub use context::*;
pub use errors::*;
pub use work::*;
