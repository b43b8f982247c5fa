//! MPA — Marker PDU Aligned Framing for TCP (RFC 5044, with RFC 6581's revision 2), sans I/O.
//!
//! Data flows through the modules in this order:
//! * [`startup`]: the startup phase (Request/Reply frames, negotiation, both roles), with
//!   [`rtr`] the Ready-to-Receive types it negotiates.
//! * [`encoder`]: ULPDUs to FPDU wire octets (PAD, CRC, markers) at a stream position.
//! * [`decoder`]: in-order FPDU deframing from arbitrary chunks (markers stripped, CRC checked).
//! * [`locator`]: out-of-order location of whole FPDUs inside one segment, using markers.
//! * [`wire`]: byte views (smoltcp style) for every format: FPDU, marker, startup frame, DDP/RDMAP.
//! * [`endpoint`]: a blocking MPA endpoint over any `Read + Write` (kernel TCP).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod crc;
pub mod decoder;
pub mod encoder;
pub mod endpoint;
pub mod error;
pub mod fuzz;
pub mod locator;
pub mod markers;
pub mod rtr;
pub mod seq;
pub mod startup;
pub mod wire;

pub use error::{Fault, MpaErrorCode};
pub use seq::SeqNumber;
