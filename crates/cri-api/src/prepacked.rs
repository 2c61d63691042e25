//! Wire twins of the two list answers of kubelet's relist,
//! `ListContainersResponse` and `ListPodSandboxResponse`: besides the
//! generated field (`containers`, `items`) they carry `encoded`, entries a
//! server encoded ahead of time, sent after the field's own entries as the
//! same repeated field. On the wire they are the generated messages (a
//! client decodes them with the generated types, or with these, which fill
//! the field). [`Entry`] is one such entry, kept by a server with its
//! object.
//!
//! Wire-level code only: the bytes are the protobuf encoding prost writes
//! for the same message (the server's tests compare them byte for byte).

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::v1;

/// One list entry (a `Container` or a `PodSandbox`) encoded ahead of time
/// but for its state, the one field of the entry that changes: `head` holds
/// the fields numbered below the state's, `tail` those above it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    bytes: Box<[u8]>,
    split: usize,
}

/// Length of the prefix of a message in gRPC over HTTP/2: a flag byte
/// (0: not compressed), then the message's length (u32, big-endian).
pub const GRPC_PREFIX_LEN: usize = 5;

/// A list answer holding `entries` (each with its state; `state_key` the
/// key of the entries' state field) as one gRPC message, its
/// [`GRPC_PREFIX_LEN`] prefix first: what a server sends as the body of
/// the answer, as it is. One buffer of the exact size, the entries copied
/// in. `None` when the answer is longer than a gRPC message can say.
pub fn pack_grpc_message<'a>(
    entries: impl Iterator<Item = (&'a Entry, i32)> + Clone,
    state_key: u8,
) -> Option<Vec<u8>> {
    let mut out = pack_after(GRPC_PREFIX_LEN, entries, state_key);
    let len = u32::try_from(out.len() - GRPC_PREFIX_LEN).ok()?;
    out[1..GRPC_PREFIX_LEN].copy_from_slice(&len.to_be_bytes());
    Some(out)
}

/// The entries as the repeated field 1 of a message, after `room` zero
/// bytes, in one buffer of the exact size.
fn pack_after<'a>(
    room: usize,
    entries: impl Iterator<Item = (&'a Entry, i32)> + Clone,
    state_key: u8,
) -> Vec<u8> {
    let len: usize = entries.clone().map(|(e, state)| e.list_len(state)).sum();
    let mut out = Vec::with_capacity(room + len);
    out.resize(room, 0);
    for (e, state) in entries {
        e.write(state_key, state, &mut out);
    }
    out
}

impl Entry {
    /// The entry of `head` then `tail` (each the encoding of a message with
    /// only the fields on that side of the state set).
    pub fn new(head: &[u8], tail: &[u8]) -> Entry {
        let mut bytes = Vec::with_capacity(head.len() + tail.len());
        bytes.extend_from_slice(head);
        bytes.extend_from_slice(tail);
        Entry {
            bytes: bytes.into_boxed_slice(),
            split: head.len(),
        }
    }

    /// Bytes this entry takes in a list answer (as an element of field 1)
    /// with state `state`.
    pub fn list_len(&self, state: i32) -> usize {
        let len = self.len_with(state);
        1 + encoding::encoded_len_varint(len as u64) + len
    }

    /// Appends the entry to `out` as one element of field 1 of a list
    /// answer, with state `state` (a field with key `state_key`; not
    /// written when 0, as prost leaves a default enum out).
    pub fn write(&self, state_key: u8, state: i32, out: &mut Vec<u8>) {
        out.push(0x0a); // field 1, length-delimited
        encoding::encode_varint(self.len_with(state) as u64, out);
        out.extend_from_slice(&self.bytes[..self.split]);
        if state != 0 {
            out.push(state_key);
            encoding::encode_varint(i64::from(state) as u64, out);
        }
        out.extend_from_slice(&self.bytes[self.split..]);
    }

    fn len_with(&self, state: i32) -> usize {
        let state_len = if state == 0 {
            0
        } else {
            1 + encoding::encoded_len_varint(i64::from(state) as u64)
        };
        self.bytes.len() + state_len
    }
}

macro_rules! prepacked_list {
    ($(#[$doc:meta])* $name:ident, $field:ident: $item:ty) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Default)]
        pub struct $name {
            /// The entries as messages (what a client's decoding fills).
            pub $field: Vec<$item>,
            /// Entries already encoded as elements of field 1 (key and
            /// length included), sent after those of the field above.
            pub encoded: Vec<u8>,
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field(stringify!($field), &self.$field)
                    .field("encoded", &format_args!("{} bytes", self.encoded.len()))
                    .finish()
            }
        }

        impl Message for $name {
            fn encode_raw(&self, buf: &mut impl BufMut) {
                for item in &self.$field {
                    encoding::message::encode(1, item, buf);
                }
                buf.put_slice(&self.encoded);
            }

            fn merge_field(
                &mut self,
                tag: u32,
                wire_type: WireType,
                buf: &mut impl Buf,
                ctx: DecodeContext,
            ) -> Result<(), DecodeError> {
                if tag == 1 {
                    encoding::message::merge_repeated(wire_type, &mut self.$field, buf, ctx)
                        .map_err(|mut e| {
                            e.push(stringify!($name), stringify!($field));
                            e
                        })
                } else {
                    encoding::skip_field(wire_type, tag, buf, ctx)
                }
            }

            fn encoded_len(&self) -> usize {
                encoding::message::encoded_len_repeated(1, &self.$field) + self.encoded.len()
            }

            fn clear(&mut self) {
                self.$field.clear();
                self.encoded.clear();
            }
        }
    };
}

prepacked_list!(
    /// `runtime.v1.ListContainersResponse` (`repeated Container containers = 1`).
    ListContainersResponse,
    containers: v1::Container
);

prepacked_list!(
    /// `runtime.v1.ListPodSandboxResponse` (`repeated PodSandbox items = 1`).
    ListPodSandboxResponse,
    items: v1::PodSandbox
);

/// A whole answer encoded ahead of time (a status call's, whose parts a
/// server keeps encoded): its encoding is `bytes`. Servers send it; a
/// client decodes the generated type (decoding this keeps nothing).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Encoded {
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for Encoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Encoded({} bytes)", self.bytes.len())
    }
}

impl Encoded {
    /// Appends `message` (bytes already encoded) as field `tag`.
    pub fn put_message(&mut self, tag: u32, message: &[u8]) {
        encoding::encode_key(tag, WireType::LengthDelimited, &mut self.bytes);
        encoding::encode_varint(message.len() as u64, &mut self.bytes);
        self.bytes.extend_from_slice(message);
    }

    /// Appends the fields of `message`, encoded now.
    pub fn put_fields(&mut self, message: &impl Message) {
        message.encode_raw(&mut self.bytes);
    }
}

impl Message for Encoded {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.bytes);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    fn clear(&mut self) {
        self.bytes.clear();
    }
}
