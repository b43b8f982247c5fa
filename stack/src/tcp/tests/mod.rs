//! State-machine tests on virtual time: a scripted peer (`conn`), and two connections over a
//! lossy, reordering, duplicating in-memory link (`pair`, in the manner of quinn's `Pair`).

mod backlog;
mod batched;
mod budget;
mod bulk;
mod conn;
mod hardening;
pub(crate) mod harness;
pub(crate) mod pair;
mod reaping;
