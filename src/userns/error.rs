//! The user namespace manager's errors, each worded as upstream's
//! `fmt.Errorf` (pkg/kubelet/userns/userns_manager.go and
//! kubelet_pods.go `getKubeletMappings`/`parseGetSubIdsOutput`); the
//! wrappers (`user namespace: …`, `record pod mappings for existing pod
//! "<uid>": …`) keep the inner error as their source, as `%w` does.

use std::path::PathBuf;

/// Why a range, a checkpoint or an allocation was refused. Filesystem
/// errors read as Go's `*PathError` (`open /var/lib/kubelet/pods/<uid>/userns:
/// permission denied`), so the file is always named.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    // --- the kubelet's ID range (kubelet_pods.go getKubeletMappings) ---
    #[error("error parsing line {input:?}: it must contain only one line")]
    NotOneLine { input: String },
    #[error("invalid line {input:?}")]
    InvalidLine { input: String },
    /// A field that is not a `uint32`; `detail` is Go's strconv text
    /// (`strconv.ParseUint: parsing "x": invalid syntax`).
    #[error("error parsing line {input:?}: {detail}")]
    ParseNumber { input: String, detail: String },
    #[error("error retrieving additional ids for user {user:?}")]
    RetrieveIds { user: String },
    #[error("error retrieving additional gids for user {user:?}")]
    RetrieveGids { user: String },
    #[error("mismatched subuids and subgids for user {user:?}")]
    MismatchedSubids { user: String },
    /// Go's `exec.LookPath` error, which v1.34 returns as is: its
    /// `os.IsNotExist` check does not match an `*exec.Error`.
    #[error("exec: {name:?}: executable file not found in $PATH")]
    ExecutableNotFound { name: String },
    /// Upstream `MakeUserNsManager`'s wrapping of the range lookup.
    #[error("kubelet mappings: {0}")]
    KubeletMappings(#[source] Box<UsernsError>),

    // --- MakeUserNsManager's checks of the range ---
    #[error("kubelet user assigned ID {first} is not a multiple of {unit}")]
    FirstNotMultiple { first: u32, unit: u32 },
    #[error("kubelet user assigned ID {first} must be greater or equal to {unit}")]
    FirstTooLow { first: u32, unit: u32 },
    #[error("kubelet user assigned IDs length {len} is not a multiple of {unit}")]
    LenNotMultiple { len: u32, unit: u32 },
    #[error("kubelet user assigned IDs are not enough to support {max_pods} pods")]
    NotEnoughIds { max_pods: u32 },

    // --- the pods directory and the checkpoint file ---
    #[error("read pods from disk: {0}")]
    ReadPodsDir(#[source] Box<UsernsError>),
    /// A pod's checkpoint that could not be recorded at start-up; as
    /// upstream, the manager (and so the kubelet) is not built.
    #[error("record pod mappings for existing pod {pod:?}: {source}")]
    RecordExisting {
        pod: String,
        /// The checkpoint file, for logs; upstream's text names the pod.
        path: PathBuf,
        source: Box<UsernsError>,
    },
    /// `utilstore.NewFileStore` failing to create the pod directory.
    #[error("create user namespace store: {0}")]
    CreateStore(#[source] Box<UsernsError>),
    /// One filesystem call: `op` is Go's (`open`, `write`, `sync`, `mkdir`,
    /// `rename`), `path` the file (for `rename`, both names).
    #[error("{op} {path}: {}", go_text(.source))]
    Io {
        op: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Encode(String),
    /// The JSON decoder's own text follows (serde_json's, not Go's).
    #[error("invalid user namespace mappings file: {0}")]
    InvalidFile(String),
    #[error("invalid user namespace configuration: no more than one mapping allowed.")]
    NotOneMapping,
    #[error("invalid user namespace configuration: GID and UID mappings should be identical.")]
    MappingCountsDiffer,
    #[error("invalid user namespace configuration: GID and UID mapping should be identical")]
    MappingsDiffer,
    #[error("invalid user namespace configuration: UID 0 must be mapped")]
    UidZeroNotMapped,
    #[error("invalid user namespace configuration: GID 0 must be mapped")]
    GidZeroNotMapped,

    // --- the allocator (record / allocateOne) ---
    #[error("wrong user namespace length {0}")]
    WrongLength(u32),
    #[error("wrong user namespace offset specified {0}")]
    WrongOffset(u32),
    #[error("different user namespace range already used by pod {pod:?}")]
    DifferentRange { pod: String },
    #[error("id {0} is out of range")]
    OutOfRange(u32),
    #[error("range picked for pod {pod:?} already taken")]
    RangeTaken { pod: String },
    #[error("could not find an empty slot to allocate a user namespace")]
    NoFreeSlot,

    // --- GetOrCreateUserNamespaceMappings / CleanupOrphanedPodUsernsAllocations ---
    #[error("user namespace: {0}")]
    UserNamespace(#[source] Box<UsernsError>),
    #[error("create user namespace: {0}")]
    CreateUserNamespace(#[source] Box<UsernsError>),
}

impl UsernsError {
    /// A filesystem error on `path`, worded as Go's `*PathError`.
    pub(super) fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        UsernsError::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

/// An io::Error as Go prints a syscall error: `permission denied`, not
/// `Permission denied (os error 13)`; both come from the same strerror table.
fn go_text(e: &std::io::Error) -> String {
    let full = e.to_string();
    let text = match full.find(" (os error ") {
        Some(i) => &full[..i],
        None => full.as_str(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `s` as Go's `strconv.ParseUint(s, 10, 32)` reads it, with Go's error
/// text when it does not parse.
pub(super) fn parse_u32_go(s: &str) -> Result<u32, String> {
    // Go takes no sign; Rust's parser would accept a leading '+'.
    let digits_only = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits_only {
        return Err(format!("strconv.ParseUint: parsing {s:?}: invalid syntax"));
    }
    s.parse::<u32>()
        .map_err(|_| format!("strconv.ParseUint: parsing {s:?}: value out of range"))
}
