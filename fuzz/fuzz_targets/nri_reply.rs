//! What a plugin sends berth, as protobuf: its replies to CreateContainer,
//! UpdateContainer, StopContainer, Synchronize, Configure and validation,
//! and its own requests (RegisterPlugin, UpdateContainers). The first byte
//! picks the message; a decoded CreateContainer or UpdateContainer reply is
//! then merged, as berth merges plugins' replies.
#![no_main]

use berth_nri::api;
use berth_nri::merge::{CreateMerge, UpdateMerge};
use libfuzzer_sys::fuzz_target;
use protobuf::Message;

fn create_request() -> api::CreateContainerRequest {
    let mut c = api::Container::new();
    c.id = "c1".into();
    c.env.push("PATH=/bin".into());
    api::CreateContainerRequest {
        container: protobuf::MessageField::some(c),
        ..Default::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 8 {
        0 => {
            if let Ok(r) = api::CreateContainerResponse::parse_from_bytes(bytes) {
                let mut m = CreateMerge::new(create_request());
                // Twice, as two plugins: the second conflicts or overrides.
                if m.apply(&r, "10-a").is_ok() {
                    let _ = m.apply(&r, "20-b");
                }
                let _ = m.into_response().write_to_bytes();
            }
        }
        1 => {
            if let Ok(r) = api::UpdateContainerResponse::parse_from_bytes(bytes) {
                let mut m = UpdateMerge::new(None, Some(("c1".into(), Default::default())));
                let _ = m.apply(&r.update, "10-a");
                let _ = m.apply(&r.update, "20-b");
                let _ = m.into_updates();
            }
        }
        2 => {
            if let Ok(r) = api::StopContainerResponse::parse_from_bytes(bytes) {
                let mut m = UpdateMerge::new(None, None);
                let _ = m.apply(&r.update, "10-a");
            }
        }
        3 => {
            let _ = api::SynchronizeResponse::parse_from_bytes(bytes);
        }
        4 => {
            let _ = api::ConfigureResponse::parse_from_bytes(bytes);
        }
        5 => {
            let _ = api::ValidateContainerAdjustmentResponse::parse_from_bytes(bytes);
        }
        6 => {
            let _ = api::RegisterPluginRequest::parse_from_bytes(bytes);
        }
        _ => {
            let _ = api::UpdateContainersRequest::parse_from_bytes(bytes);
        }
    }
});
