//! The sandbox store: [`berth_store::Store`] of sandbox records.

use berth_store::{Meta, Object, Store};

use super::record::{SandboxMeta, SandboxStatus};
use crate::objects::Kind;

impl Meta for SandboxMeta {
    fn id(&self) -> &str {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
}

impl Kind for SandboxMeta {
    const KIND: &'static str = "pod sandbox";
}

/// One sandbox.
pub type Sandbox = Object<SandboxMeta, SandboxStatus>;

/// All sandboxes.
pub type SandboxStore = Store<SandboxMeta, SandboxStatus>;
