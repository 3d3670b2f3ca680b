//! PLEG's listings as the runtime sent them. ListPodSandbox and
//! ListContainers answer every second with the same elements, but the
//! generated decoder rebuilds each one: every label and annotation is two
//! strings and a map insert. That was about half of the relist's CPU.
//! These calls keep the answer's bytes and split it into its elements, so
//! the caller decodes (with the generated code) only the elements whose
//! bytes changed since the last relist.

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
            let wire = WireType::new(tag & 7).ok_or(protobuf::Error::from(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "unknown wire type",
            )))?;
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
