//! SPDY/3.1, the multiplexing protocol kubelet's clients (client-go,
//! crictl, critest) upgrade to: frames ([`frame`]), header compression
//! ([`zlib`]) and sessions of streams ([`conn`]).

pub mod conn;
pub mod frame;
pub mod zlib;

pub use conn::{Accept, Connection, Role, Stream, StreamWriter};
pub use frame::{Frame, FrameError, Headers};
