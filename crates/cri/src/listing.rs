//! PLEG's listings as the runtime sent them. ListPodSandbox and
//! ListContainers answer every second with the same elements, but the
//! generated decoder rebuilds each one: every label and annotation is two
//! strings and a map insert. That was about half of the relist's CPU.
//! These calls keep the answer's bytes and split it into its elements, so
//! the caller decodes (with the generated code) only the elements that
//! are new or changed state since the last relist ([`element_key`]).

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
            out.push(length_delimited(&mut input, &self.bytes)?);
        }
        Ok(out)
    }
}

/// Which answer an element came from: where its state is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementKind {
    /// A `PodSandbox` of ListPodSandbox (`state = 3`).
    Sandbox,
    /// A `Container` of ListContainers (`state = 6`).
    Container,
}

impl ElementKind {
    fn state_field(self) -> u32 {
        match self {
            ElementKind::Sandbox => 3,
            ElementKind::Container => 6,
        }
    }
}

/// What tells an element of one listing from another, and from itself in
/// an earlier listing: its ID (`id = 1` in both messages) and its state
/// (0, proto3's default, when the field is absent). CRI fixes a sandbox's
/// or container's other fields (metadata, labels, annotations, image,
/// creation time) when the runtime creates it; no call changes them. So
/// an element with the ID and state of one in the last listing is that
/// element as it was, whatever order Go wrote its map entries in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ElementKey<'a> {
    pub id: &'a [u8],
    pub state: u64,
}

/// The key of an encoded element. Every top-level field is walked, so a
/// malformed element is an error here, not only when it is decoded; the
/// last occurrence of a field wins, as in protobuf's decoder.
pub fn element_key(kind: ElementKind, element: &[u8]) -> protobuf::Result<ElementKey<'_>> {
    let mut key = ElementKey { id: &[], state: 0 };
    let mut input = CodedInputStream::from_bytes(element);
    while let Some(tag) = input.read_raw_tag_or_eof()? {
        let wire = wire_type(tag)?;
        match (tag >> 3, wire) {
            (1, WireType::LengthDelimited) => key.id = length_delimited(&mut input, element)?,
            (field, WireType::Varint) if field == kind.state_field() => {
                key.state = input.read_raw_varint64()?;
            }
            _ => input.skip_field(wire)?,
        }
    }
    Ok(key)
}

/// The bytes of the length-delimited field whose tag `input` (reading
/// `bytes`) has just read.
fn length_delimited<'a>(
    input: &mut CodedInputStream<'_>,
    bytes: &'a [u8],
) -> protobuf::Result<&'a [u8]> {
    let len = input.read_raw_varint32()?;
    let start = usize::try_from(input.pos()).unwrap_or(usize::MAX);
    // Bounds-checked by the skip: a length past the end fails it.
    input.skip_raw_bytes(len)?;
    Ok(&bytes[start..start.saturating_add(len as usize)])
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
    fn the_key_is_the_id_and_state_whatever_the_order_of_map_entries() {
        use protobuf::CodedOutputStream;
        // One container with two labels, written in both orders, as Go's
        // encoder does: field 1 (id), field 8 entries, field 6 (state).
        let entry = |k: &str, v: &str| {
            let mut e = Vec::new();
            let mut out = CodedOutputStream::vec(&mut e);
            out.write_string(1, k).unwrap();
            out.write_string(2, v).unwrap();
            out.flush().unwrap();
            drop(out);
            e
        };
        let element = |id: &str, entries: &[Vec<u8>], state: u64| {
            let mut b = Vec::new();
            let mut out = CodedOutputStream::vec(&mut b);
            out.write_string(1, id).unwrap();
            for e in entries {
                out.write_bytes(8, e).unwrap();
            }
            out.write_uint64(6, state).unwrap();
            out.flush().unwrap();
            drop(out);
            b
        };
        fn key(bytes: &[u8]) -> ElementKey<'_> {
            element_key(ElementKind::Container, bytes).unwrap()
        }
        let (a, b) = (entry("a", "1"), entry("b", "2"));
        let one = element("c1", &[a.clone(), b.clone()], 1);
        let other = element("c1", &[b.clone(), a.clone()], 1);
        assert_ne!(one, other);
        assert_eq!(key(&one), key(&other));
        assert_eq!(
            key(&one),
            ElementKey {
                id: b"c1",
                state: 1
            }
        );
        let decoded = api::Container::parse_from_bytes(&one).unwrap();
        assert_eq!(decoded.labels.len(), 2);
        let exited = element("c1", &[a.clone(), b.clone()], 2);
        assert_ne!(key(&one), key(&exited));
        let another = element("c2", &[a, b], 1);
        assert_ne!(key(&one), key(&another));
        assert!(element_key(ElementKind::Container, &[8 << 3 | 2, 9]).is_err());
    }

    #[test]
    fn a_sandbox_state_is_its_own_field_and_ready_is_the_default() {
        let sandbox = |state: api::PodSandboxState| api::PodSandbox {
            id: "s1".into(),
            state: state.into(),
            annotations: [("a".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let ready = sandbox(api::PodSandboxState::SANDBOX_READY)
            .write_to_bytes()
            .unwrap();
        let not_ready = sandbox(api::PodSandboxState::SANDBOX_NOTREADY)
            .write_to_bytes()
            .unwrap();
        // (proto3 leaves a default state out of the bytes)
        assert_eq!(
            element_key(ElementKind::Sandbox, &ready).unwrap(),
            ElementKey {
                id: b"s1",
                state: 0
            }
        );
        assert_eq!(
            element_key(ElementKind::Sandbox, &not_ready).unwrap(),
            ElementKey {
                id: b"s1",
                state: 1
            }
        );
        // Read as a container's, the sandbox's field 3 is not its state.
        assert_eq!(
            element_key(ElementKind::Container, &not_ready)
                .unwrap()
                .state,
            0
        );
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
