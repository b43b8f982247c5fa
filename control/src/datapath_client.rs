//! The connection-setup side of the control socket: the shared client of `mpa-ctl-proto`
//! (requests matched to answers, notifications queued, every wait bounded).

pub use mpa_ctl_proto::client::{ClientError, ControlClient as DatapathClient};
