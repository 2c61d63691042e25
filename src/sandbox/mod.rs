//! Pod sandboxes: their records and store, shared files, and the pause
//! container's spec.

pub mod facts;
pub mod files;
pub mod record;
pub mod store;

pub use record::{PodResources, SandboxMeta, SandboxState, SandboxStatus};
pub use store::{Sandbox, SandboxStore};
