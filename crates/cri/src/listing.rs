//! PLEG's listings as the runtime sent them. ListPodSandbox and
//! ListContainers answer every second with the same elements, but the
//! generated decoder rebuilds each one: every label and annotation is two
//! strings and a map insert. That was about half of the relist's CPU.
//! These calls keep the answer's bytes and split it into its elements, so
//! the caller decodes (with the generated code) only the elements whose
//! bytes changed since the last relist.

use std::hash::BuildHasher;

use grpcio::{GrpcSlice, Marshaller, MessageReader, Method, MethodType};
use protobuf::rt::WireType;
use protobuf::CodedInputStream;

use crate::api;

/// An answer of ListPodSandbox or ListContainers, undecoded. Both hold
/// their elements as `repeated ... = 1` (`items`, `containers`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawListing {
    bytes: Vec<u8>,
}

/// The field number of both answers' elements.
const ELEMENTS_FIELD: u32 = 1;

impl RawListing {
    /// A listing from an encoded answer (the gRPC decoder; tests).
    pub fn from_bytes(bytes: Vec<u8>) -> RawListing {
        RawListing { bytes }
    }

    /// The encoded elements, in the order sent. Other fields (a newer
    /// runtime's) are skipped; a malformed answer is an error.
    pub fn elements(&self) -> protobuf::Result<Vec<&[u8]>> {
        let mut out = Vec::new();
        let mut input = CodedInputStream::from_bytes(&self.bytes);
        while let Some(tag) = input.read_raw_tag_or_eof()? {
            let wire = wire_type(tag)?;
            if tag >> 3 != ELEMENTS_FIELD || wire != WireType::LengthDelimited {
                input.skip_field(wire)?;
                continue;
            }
            let len = input.read_raw_varint32()?;
            let start = usize::try_from(input.pos()).unwrap_or(usize::MAX);
            let end = start.saturating_add(len as usize);
            // Bounds-checked by the skip: a length past the end fails it.
            input.skip_raw_bytes(len)?;
            out.push(&self.bytes[start..end]);
        }
        Ok(out)
    }
}

/// A key of an encoded element under `keys` that does not depend on the
/// order of its fields: the wrapping sum of each top-level field's keyed
/// hash. Go's encoder writes a map's entries (labels, annotations) in a
/// random order each time, so equal elements rarely have equal bytes; the
/// order of top-level fields carries nothing here (no element repeats a
/// field but its maps).
pub fn element_key(keys: &impl BuildHasher, element: &[u8]) -> protobuf::Result<u64> {
    let mut key = 0u64;
    let mut input = CodedInputStream::from_bytes(element);
    let mut start = 0;
    while let Some(tag) = input.read_raw_tag_or_eof()? {
        input.skip_field(wire_type(tag)?)?;
        let end = usize::try_from(input.pos()).unwrap_or(usize::MAX);
        let field = element.get(start..end).unwrap_or_default();
        key = key.wrapping_add(keys.hash_one(field));
        start = end;
    }
    Ok(key)
}

fn wire_type(tag: u32) -> protobuf::Result<WireType> {
    WireType::new(tag & 7).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "unknown wire type").into()
    })
}

/// The gRPC decoder: the answer's bytes, copied out of gRPC's slices.
fn de(mut reader: MessageReader) -> grpcio::Result<RawListing> {
    use std::io::Read;
    let mut bytes = Vec::with_capacity(reader.len());
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| grpcio::Error::Codec(Box::new(e)))?;
    Ok(RawListing { bytes })
}

/// Never called: a client only decodes answers.
fn ser(_: &RawListing, _: &mut GrpcSlice) -> grpcio::Result<()> {
    Err(grpcio::Error::Codec("a raw listing is never sent".into()))
}

const RAW: Marshaller<RawListing> = Marshaller { ser, de };

/// CRI's ListPodSandbox, the answer left undecoded.
pub(crate) const LIST_POD_SANDBOX: Method<api::ListPodSandboxRequest, RawListing> = Method {
    ty: MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListPodSandbox",
    req_mar: Marshaller {
        ser: grpcio::pb_ser,
        de: grpcio::pb_de,
    },
    resp_mar: RAW,
};

/// CRI's ListContainers, the answer left undecoded.
pub(crate) const LIST_CONTAINERS: Method<api::ListContainersRequest, RawListing> = Method {
    ty: MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListContainers",
    req_mar: Marshaller {
        ser: grpcio::pb_ser,
        de: grpcio::pb_de,
    },
    resp_mar: RAW,
};

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::Message;

    fn container(id: &str) -> api::Container {
        api::Container {
            id: id.into(),
            labels: [("io.kubernetes.pod.uid".to_string(), format!("uid-{id}"))].into(),
            created_at: 7,
            ..Default::default()
        }
    }

    #[test]
    fn elements_are_the_answers_items_in_order() {
        let answer = api::ListContainersResponse {
            containers: vec![container("a"), container("b")],
            ..Default::default()
        };
        let mut bytes = answer.write_to_bytes().unwrap();
        // A field this client does not know, from a newer runtime.
        bytes.extend_from_slice(&[(9 << 3) | 2, 3, b'x', b'y', b'z']);
        let listing = RawListing::from_bytes(bytes);
        let parsed: Vec<api::Container> = listing
            .elements()
            .unwrap()
            .iter()
            .map(|e| api::Container::parse_from_bytes(e).unwrap())
            .collect();
        assert_eq!(parsed, answer.containers);
    }

    #[test]
    fn the_sandbox_answer_splits_the_same_way() {
        let answer = api::ListPodSandboxResponse {
            items: vec![api::PodSandbox {
                id: "s1".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let listing = RawListing::from_bytes(answer.write_to_bytes().unwrap());
        let elements = listing.elements().unwrap();
        assert_eq!(elements.len(), 1);
        assert_eq!(
            api::PodSandbox::parse_from_bytes(elements[0]).unwrap().id,
            "s1"
        );
        assert!(RawListing::default().elements().unwrap().is_empty());
    }

    #[test]
    fn the_key_ignores_the_order_of_map_entries_but_not_a_change() {
        use protobuf::CodedOutputStream;
        let keys = std::collections::hash_map::RandomState::new();
        // One element with two labels, written in both orders, as Go's
        // encoder may: field 1 (id), then field 8 entries.
        let entry = |k: &str, v: &str| {
            let mut e = Vec::new();
            let mut out = CodedOutputStream::vec(&mut e);
            out.write_string(1, k).unwrap();
            out.write_string(2, v).unwrap();
            out.flush().unwrap();
            drop(out);
            e
        };
        let element = |entries: &[Vec<u8>], state: u64| {
            let mut b = Vec::new();
            let mut out = CodedOutputStream::vec(&mut b);
            out.write_string(1, "c1").unwrap();
            for e in entries {
                out.write_bytes(8, e).unwrap();
            }
            out.write_uint64(6, state).unwrap();
            out.flush().unwrap();
            drop(out);
            b
        };
        let (a, b) = (entry("a", "1"), entry("b", "2"));
        let one = element(&[a.clone(), b.clone()], 1);
        let other = element(&[b.clone(), a.clone()], 1);
        assert_ne!(one, other);
        assert_eq!(
            element_key(&keys, &one).unwrap(),
            element_key(&keys, &other).unwrap()
        );
        let decoded = api::Container::parse_from_bytes(&one).unwrap();
        assert_eq!(decoded.labels.len(), 2);
        let exited = element(&[a.clone(), b.clone()], 2);
        assert_ne!(
            element_key(&keys, &one).unwrap(),
            element_key(&keys, &exited).unwrap()
        );
        let relabelled = element(&[a, entry("b", "3")], 1);
        assert_ne!(
            element_key(&keys, &one).unwrap(),
            element_key(&keys, &relabelled).unwrap()
        );
        assert!(element_key(&keys, &[8 << 3 | 2, 9]).is_err());
    }

    #[test]
    fn a_truncated_answer_is_an_error_not_a_short_list() {
        let answer = api::ListContainersResponse {
            containers: vec![container("a")],
            ..Default::default()
        };
        let mut bytes = answer.write_to_bytes().unwrap();
        bytes.truncate(bytes.len() - 2);
        assert!(RawListing::from_bytes(bytes).elements().is_err());
        assert!(RawListing::from_bytes(vec![(1 << 3) | 7])
            .elements()
            .is_err());
    }
}
