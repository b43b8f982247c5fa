//! The request id of every message that carries one: the link rewrites the ids of the
//! requests it forwards onto its own connection and puts the relay's back into the answers.

use mpa_ctl_proto::Message;

/// The id field of any message that has one (requests and answers).
pub(super) fn id_mut(m: &mut Message) -> Option<&mut u64> {
    match m {
        Message::AdoptFlow { id, .. }
        | Message::FlowAdopted { id, .. }
        | Message::HandOver { id, .. }
        | Message::HandedOver { id, .. }
        | Message::CloseFlow { id, .. }
        | Message::FinishFlow { id, .. }
        | Message::GetStats { id, .. }
        | Message::Stats { id, .. }
        | Message::Ok { id }
        | Message::Error { id, .. }
        | Message::CreateRegion { id, .. }
        | Message::RegionCreated { id, .. }
        | Message::RegisterRegion { id, .. }
        | Message::RegionRegistered { id, .. }
        | Message::DestroyRegion { id, .. }
        | Message::ListRegions { id, .. }
        | Message::Regions { id, .. }
        | Message::PostRecv { id, .. }
        | Message::Post { id, .. }
        | Message::Posted { id, .. }
        | Message::Subscribe { id, .. }
        | Message::Subscribed { id, .. }
        | Message::Unsubscribe { id, .. }
        | Message::WatchPort { id, .. }
        | Message::UnwatchPort { id, .. }
        | Message::StartCapture { id, .. }
        | Message::StopCapture { id }
        | Message::AllocPd { id }
        | Message::PdAllocated { id, .. }
        | Message::DeallocPd { id, .. }
        | Message::Listen { id, .. }
        | Message::Listening { id, .. }
        | Message::StopListening { id, .. }
        | Message::Connect { id, .. }
        | Message::Connecting { id, .. }
        | Message::Accept { id, .. }
        | Message::Reject { id, .. }
        | Message::ServeConnections { id }
        | Message::ListenResult { id, .. }
        | Message::ConnectionRequested { id, .. }
        | Message::ConnectionQueued { id, .. }
        | Message::SetupEnded { id, .. } => Some(id),
        Message::Hello { .. }
        | Message::FlowGone { .. }
        | Message::Captured { .. }
        | Message::CaptureDone { .. }
        | Message::CmEvent { .. }
        | Message::ManagerListen { .. }
        | Message::ManagerStopListening { .. }
        | Message::ManagerDecision { .. }
        | Message::ManagerConnect { .. }
        | Message::ManagerCancel { .. } => None,
    }
}
