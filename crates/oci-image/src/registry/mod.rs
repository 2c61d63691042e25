//! Talking to registries: the hosts to ask for a name (mirrors,
//! `hosts.toml`), their credentials and token flows, HTTP clients guarded
//! against redirects and names that reach where they should not, and the
//! resolution of a reference to its manifest and blobs.

pub(crate) mod auth;
pub(crate) mod client;
pub(crate) mod hosts;
pub(crate) mod remote;
