//! Generic netlink messages of the families the probe asks (nlctrl, ethtool, netdev, devlink),
//! carried by `netlink-packet-generic`'s `GenlMessage`: a command and attributes to send; a
//! reply's attributes kept as octets for the family's reader to walk with [`super::attrs`].

use super::{attrs, Conn, NlError};
use netlink_packet_core::{DecodeError, DefaultNla, Emitable, ParseableParametrized};
use netlink_packet_generic::constants::{
    CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_CMD_GETFAMILY, GENL_ID_CTRL,
};
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};
use std::fmt::Debug;
use std::marker::PhantomData;

/// A generic netlink family: its name and protocol version.
pub(crate) trait Family: Debug {
    /// The name the controller resolves (`ethtool`).
    const NAME: &'static str;
    /// The protocol version put in requests.
    const VERSION: u8;
    /// A fixed family id (only the controller has one); 0: resolved by name.
    const ID: u16 = 0;
}

/// One message of family `F`: a command and its attributes.
#[derive(Debug)]
pub(crate) struct Msg<F> {
    /// The command.
    pub cmd: u8,
    /// Attributes to send (empty in a reply).
    pub send: Vec<DefaultNla>,
    /// A reply's attributes, as octets.
    pub reply: Vec<u8>,
    family: PhantomData<F>,
}

impl<F: Family> Msg<F> {
    /// A request: `cmd` with `attrs`.
    pub(crate) fn request(cmd: u8, attrs: Vec<DefaultNla>) -> Self {
        Msg {
            cmd,
            send: attrs,
            reply: Vec::new(),
            family: PhantomData,
        }
    }
}

impl<F: Family> GenlFamily for Msg<F> {
    fn family_name() -> &'static str {
        F::NAME
    }
    fn family_id(&self) -> u16 {
        F::ID
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        F::VERSION
    }
}

impl<F> Emitable for Msg<F> {
    fn buffer_len(&self) -> usize {
        self.send.as_slice().buffer_len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        self.send.as_slice().emit(buffer)
    }
}

impl<F> ParseableParametrized<[u8], GenlHeader> for Msg<F> {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        Ok(Msg {
            cmd: header.cmd,
            send: Vec::new(),
            // Bounded by the datagram (super::MAX_DATAGRAM).
            reply: buf.to_vec(),
            family: PhantomData,
        })
    }
}

/// The generic netlink controller (`nlctrl`), which resolves family names.
#[derive(Debug)]
pub(crate) struct Ctrl;

impl Family for Ctrl {
    const NAME: &'static str = "nlctrl";
    const VERSION: u8 = 2;
    const ID: u16 = GENL_ID_CTRL;
}

/// Sends `cmd` with `attrs` to family `F` (its id resolved first) and returns the reply's
/// attributes. A family the kernel does not have is `ENOENT` from the controller.
pub(crate) fn ask<F: Family>(
    conn: &mut Conn,
    cmd: u8,
    attrs: Vec<DefaultNla>,
) -> Result<Vec<u8>, NlError> {
    let id = resolve::<F>(conn)?;
    let mut msg = GenlMessage::from_payload(Msg::<F>::request(cmd, attrs));
    msg.set_resolved_family_id(id);
    let reply = conn.request(msg)?;
    Ok(reply.payload.reply)
}

/// The controller's answer for a family it does not know.
const ENOENT: i32 = 2;

/// The id of family `F`.
fn resolve<F: Family>(conn: &mut Conn) -> Result<u16, NlError> {
    if F::ID != 0 {
        return Ok(F::ID);
    }
    let msg = GenlMessage::from_payload(Msg::<Ctrl>::request(
        CTRL_CMD_GETFAMILY,
        vec![attrs::string_attr(CTRL_ATTR_FAMILY_NAME, F::NAME)],
    ));
    let reply = conn.request(msg).map_err(|e| match e.errno() {
        Some(ENOENT) => NlError::NoFamily(F::NAME),
        _ => e,
    })?;
    attrs::find(&reply.payload.reply, CTRL_ATTR_FAMILY_ID)
        .as_ref()
        .and_then(attrs::u16_of)
        .ok_or(NlError::Missing("a family id"))
}
