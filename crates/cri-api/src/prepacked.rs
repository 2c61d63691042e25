//! Answers a server encodes ahead of time: [`Entry`], one entry of the two
//! list answers of kubelet's relist (`ListContainersResponse`,
//! `ListPodSandboxResponse`), kept by a server with its object, and packed
//! into the whole gRPC message of an answer ([`pack_grpc_message`]); and
//! [`Encoded`], a status call's answer made of parts kept encoded. On the
//! wire they are the generated messages: a client decodes them with the
//! generated types.
//!
//! Wire-level code only: the bytes are the protobuf encoding prost writes
//! for the same message (the server's tests compare them byte for byte).

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

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
    let len: usize = entries.clone().map(|(e, state)| e.list_len(state)).sum();
    let mut out = Vec::with_capacity(GRPC_PREFIX_LEN + len);
    out.resize(GRPC_PREFIX_LEN, 0);
    for (e, state) in entries {
        e.write(state_key, state, &mut out);
    }
    let len = u32::try_from(out.len() - GRPC_PREFIX_LEN).ok()?;
    out[1..GRPC_PREFIX_LEN].copy_from_slice(&len.to_be_bytes());
    Some(out)
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
