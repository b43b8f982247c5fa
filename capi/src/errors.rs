//! Error codes, the calling thread's last message, and the guard every exported function runs
//! its body in: a Rust error becomes a code, a panic becomes [`MPX_ERR_INTERNAL`].

use mpa_app::ConsumerError;
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::ErrorCode;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};

/// Success.
pub const MPX_OK: c_int = 0;
/// An argument is not usable: a null pointer, a handle this context does not have, a value
/// out of range.
pub const MPX_ERR_INVALID: c_int = -1;
/// The datapath refused: a limit, a request that makes no sense for the object.
pub const MPX_ERR_REFUSED: c_int = -2;
/// The object is another client's (another application's domain, connection or request).
pub const MPX_ERR_FORBIDDEN: c_int = -3;
/// No such connection, or it ended.
pub const MPX_ERR_NO_CONNECTION: c_int = -4;
/// A queue is full (a post queue, a CQ's records): nothing was done, try again later.
pub const MPX_ERR_AGAIN: c_int = -5;
/// Nothing arrived before the timeout.
pub const MPX_ERR_TIMEOUT: c_int = -6;
/// Completions were lost: the application read too slowly (the count is in the message).
pub const MPX_ERR_OVERFLOW: c_int = -7;
/// The datapath's socket or protocol failed (the datapath went away).
pub const MPX_ERR_IO: c_int = -8;
/// A bug inside the library (a panic, caught): the context should be closed.
pub const MPX_ERR_INTERNAL: c_int = -9;

/// Why a call failed: its code and message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure {
            code: MPX_ERR_INVALID,
            message: message.into(),
        }
    }
}

impl From<ConsumerError> for Failure {
    fn from(e: ConsumerError) -> Failure {
        let code = match &e {
            ConsumerError::Client(ClientError::Refused { code, .. }) => match code {
                ErrorCode::Forbidden => MPX_ERR_FORBIDDEN,
                ErrorCode::UnknownFlow => MPX_ERR_NO_CONNECTION,
                _ => MPX_ERR_REFUSED,
            },
            ConsumerError::Client(_) | ConsumerError::Ring { .. } | ConsumerError::Map { .. } => {
                MPX_ERR_IO
            }
            ConsumerError::PostQueueFull { .. } => MPX_ERR_AGAIN,
            ConsumerError::Overflow { .. } | ConsumerError::CqOverflow { .. } => MPX_ERR_OVERFLOW,
            ConsumerError::NoPostQueue(_) => MPX_ERR_NO_CONNECTION,
            _ => MPX_ERR_INVALID,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn remember(message: &str) {
    // A message with a NUL in it is cut there.
    let cut = message.split('\0').next().unwrap_or_default();
    let c = CString::new(cut).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `body`: its value, or its failure's code (the message kept for
/// [`mpx_last_error`]); a panic is [`MPX_ERR_INTERNAL`].
pub(crate) fn guard(body: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            remember(&f.message);
            f.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            remember(&format!("internal error: {what}"));
            MPX_ERR_INTERNAL
        }
    }
}

/// The message of the calling thread's last failure (empty before any): valid until this
/// thread's next failing call.
#[no_mangle]
pub extern "C" fn mpx_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// A constant name of error code `code` (`"MPX_ERR_FORBIDDEN"`), `"MPX_OK"` for 0, or
/// `"unknown"`.
#[no_mangle]
pub extern "C" fn mpx_error_name(code: c_int) -> *const c_char {
    let s: &'static [u8] = match code {
        MPX_OK => b"MPX_OK\0",
        MPX_ERR_INVALID => b"MPX_ERR_INVALID\0",
        MPX_ERR_REFUSED => b"MPX_ERR_REFUSED\0",
        MPX_ERR_FORBIDDEN => b"MPX_ERR_FORBIDDEN\0",
        MPX_ERR_NO_CONNECTION => b"MPX_ERR_NO_CONNECTION\0",
        MPX_ERR_AGAIN => b"MPX_ERR_AGAIN\0",
        MPX_ERR_TIMEOUT => b"MPX_ERR_TIMEOUT\0",
        MPX_ERR_OVERFLOW => b"MPX_ERR_OVERFLOW\0",
        MPX_ERR_IO => b"MPX_ERR_IO\0",
        MPX_ERR_INTERNAL => b"MPX_ERR_INTERNAL\0",
        _ => b"unknown\0",
    };
    s.as_ptr().cast()
}
