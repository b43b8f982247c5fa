//! `close`: ask the datapath to reset and forget one flow.

use crate::cli::Target;
use mpa_control::datapath_client::ClientError;
use mpa_ctl_proto::{ErrorCode, Message};

pub(crate) fn close(target: &Target, flow_id: u64) -> Result<(), String> {
    let (mut c, path) = target.connect()?;
    match c.request(|id| Message::CloseFlow { id, flow_id }) {
        Ok(Message::Ok { .. }) => {
            println!("flow {flow_id}: closed");
            Ok(())
        }
        Ok(m) => Err(format!("unexpected answer from {}: {m:?}", path.display())),
        Err(ClientError::Refused {
            code: ErrorCode::UnknownFlow,
            message,
        }) => Err(format!(
            "close {flow_id}: no such flow in the datapath ({message})"
        )),
        Err(e) => Err(format!(
            "close {flow_id}: datapath at {}: {e}",
            path.display()
        )),
    }
}
