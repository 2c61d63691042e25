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

mod archive;
mod artifact;
mod auth;
mod client;
mod config;
mod content;
mod error;
mod hosts;
mod image;
mod layer;
pub mod parse;
mod progress;
mod reference;
mod remote;
mod store;
mod unpack;

pub use archive::{ANNOTATION_IMAGE_NAME, ANNOTATION_REF_NAME};
pub use auth::Auth;
pub use client::install_crypto_provider;
pub use config::{format_duration, parse_duration, Mirror, RegistryConfig};
pub use error::{Error, ErrorKind};
pub use image::{Artifact, Image, ImageConfig, Layer};
pub use layer::unpack_layer;
pub use progress::{
    LayerProgress, LayerState, PullEvent, PullState, PullWatcher, ResolvedImage, BYTES_EVERY,
};
pub use reference::Reference;
pub use store::{FsUsage, GcRoots, ImageStore, Images, Pulling};
pub use unpack::{get_xattr, UnpackError, UnpackLimits};
