//! Accepts any HTTP/2 `:authority` on a local (unix) socket.
//!
//! hyper's HTTP/2 layer (h2) refuses a request whose `:authority` is not a
//! valid URI authority with `RST_STREAM(PROTOCOL_ERROR)` (hyperium/h2#487).
//! gRPC C-core (Python, Ruby, C++, C#), grpc-java, older grpc-go and older
//! grpcurl send the socket path there when they dial `unix:/run/...`, so
//! none of them could call a tonic server on a unix socket. On a unix socket
//! the authority carries no meaning.
//!
//! [`AuthorityFix`] wraps one accepted connection in front of the HTTP/2
//! server. What the client sends passes through [`Rewriter`]: it follows the
//! HTTP/2 frames, decodes each header block (HEADERS and its CONTINUATION
//! frames) with an HPACK decoder that keeps the client's dynamic table,
//! replaces an `:authority` that the server would refuse with
//! [`REPLACEMENT_AUTHORITY`], and encodes the block again with an HPACK
//! encoder of its own (its own dynamic table toward the server; a field
//! that came as a never-indexed literal goes as one). Every other frame
//! passes byte for byte. What the server sends is not touched, only read for
//! its SETTINGS: its SETTINGS_HEADER_TABLE_SIZE bounds the client's encoder
//! (decoded here) and this side's encoder, which shrinks to fit it once the
//! client acknowledges it; a size the rewriter cannot follow
//! ([`MAX_HEADER_TABLE_SIZE`]) closes the connection, so that it never
//! encodes for a table the server does not have.
//!
//! A client whose first header block names a valid authority (tonic, recent
//! grpc-go, kubelet) is not rewritten at all: that block passes as it came
//! (the server's HPACK table stays the client's) and so does the rest of the
//! connection, at the cost of one copy. A later request of such a client
//! with an invalid authority is refused by the server as before; gRPC
//! clients keep one authority per channel.
//!
//! Every buffer is bounded ([`MAX_HEADER_BLOCK`], [`MAX_HEADER_LIST`]); input
//! that cannot be followed is an [`Error`], which closes the connection.

mod io;
mod rewrite;

pub use io::AuthorityFix;
pub use rewrite::{
    Error, Rewriter, HEADER_TABLE_SIZE, MAX_HEADER_BLOCK, MAX_HEADER_LIST, MAX_HEADER_TABLE_SIZE,
    OUT_FRAME_SIZE, PREFACE, REPLACEMENT_AUTHORITY,
};
