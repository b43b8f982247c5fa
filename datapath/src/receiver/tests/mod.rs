//! The receiver alone (RTR check, Terminates, placement errors, out-of-order placement) and in
//! the in-memory pair: an Initiator's FPDU stream over a lossy, reordering, duplicating link
//! into a receiver placing into in-memory regions. No AF_XDP, no namespace, no root.

mod pair;
mod stream;
mod unit;
