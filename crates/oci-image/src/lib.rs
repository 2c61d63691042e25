//! berth's image side: pulls images from OCI registries (with mirrors,
//! containerd `hosts.toml` directories, private CAs and client
//! certificates, plain-HTTP registries, request and node credentials),
//! keeps their content by digest,
//! their metadata as one record per image, and their layers unpacked into
//! snapshot directories keyed by chain id, ready to be stacked as overlayfs
//! lowerdirs. Hostile registries and tarballs are refused without a byte
//! written outside the store.
//!
//! ```no_run
//! # async fn demo() -> Result<(), berth_oci_image::Error> {
//! use berth_oci_image::{ImageStore, RegistryConfig};
//! let store = ImageStore::open("/var/lib/berth/images".as_ref(), RegistryConfig::default()).await?;
//! let image = store.pull("busybox", None).await?;
//! let lowerdirs = store.lowerdirs(&image);
//! # Ok(()) }
//! ```

// Each module does one job: `registry` talks to registries, `store` keeps
// content and image records, `pull` fetches an image into the store,
// `archive` imports and exports tarballs; `layer` and `unpack` turn a layer
// into a snapshot for the last two.
mod archive;
mod config;
mod error;
mod layer;
pub mod parse;
mod pull;
mod reference;
mod registry;
mod store;
mod unpack;

pub use archive::{ANNOTATION_IMAGE_NAME, ANNOTATION_REF_NAME};
pub use config::{format_duration, parse_duration, Mirror, RegistryConfig};
pub use error::{Error, ErrorKind};
pub use layer::unpack_layer;
pub use pull::progress::{
    LayerProgress, LayerState, PullEvent, PullState, PullWatcher, ResolvedImage, BYTES_EVERY,
};
pub use reference::Reference;
pub use registry::auth::Auth;
pub use registry::client::install_crypto_provider;
pub use store::image::{Artifact, Image, ImageConfig, Layer};
pub use store::{FsUsage, GcRoots, ImageStore, Images, Pulling};
pub use unpack::{get_xattr, UnpackError, UnpackLimits};
