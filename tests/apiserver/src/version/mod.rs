//! The control-plane release the double emulates (`--emulate-version
//! 1.22 … 1.34`, default 1.34) and the facts of each release that a
//! kubelet can observe: what `/version` says, which resources and
//! subresources are served, which kubelet CSRs kube-controller-manager
//! approves and signs, and (in [`fields`]) which fields a write keeps.
//!
//! Each fact is a small function of [`Version`] citing the upstream
//! release, KEP or pull request it comes from, so a test (or a reader)
//! can tell why the double answers as it does.

pub mod fields;

use crate::features::FeatureGates;
use crate::resources::ResourceDef;
use serde_json::{json, Value};
use std::fmt;

/// The oldest control-plane minor rkubelet supports (and the double emulates).
pub const OLDEST_MINOR: u32 = 22;
/// The newest control-plane minor the double emulates; its default.
pub const NEWEST_MINOR: u32 = 34;

/// A Kubernetes control-plane release `1.<minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub minor: u32,
}

impl Default for Version {
    /// The newest release, unless `--emulate-version` says otherwise.
    fn default() -> Self {
        Version {
            minor: NEWEST_MINOR,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl std::str::FromStr for Version {
    type Err = String;

    /// `1.22` (or `v1.22`), within the supported range; the error names the
    /// range so a command line can print it as is.
    fn from_str(s: &str) -> Result<Self, String> {
        let range = format!("1.{OLDEST_MINOR} to 1.{NEWEST_MINOR}");
        let bad = || format!("{s:?} is not a MAJOR.MINOR version (supported: {range})");
        let (major, minor) = s
            .trim()
            .trim_start_matches('v')
            .split_once('.')
            .ok_or_else(bad)?;
        let major: u32 = major.parse().map_err(|_| bad())?;
        let minor: u32 = minor.parse().map_err(|_| bad())?;
        if major != 1 || !(OLDEST_MINOR..=NEWEST_MINOR).contains(&minor) {
            return Err(format!("{s} is not supported (supported: {range})"));
        }
        Ok(Version { minor })
    }
}

impl Version {
    /// Panics outside the supported range: for constants in tests only;
    /// outside input goes through `str::parse`.
    pub const fn new(minor: u32) -> Version {
        assert!(minor >= OLDEST_MINOR && minor <= NEWEST_MINOR);
        Version { minor }
    }

    /// This release is 1.`minor` or later.
    pub fn at_least(self, minor: u32) -> bool {
        self.minor >= minor
    }

    // ------------------------------------------------------------ /version

    /// `GET /version` as the release's kube-apiserver answers it
    /// (k8s.io/apimachinery/pkg/version.Info).
    pub fn info(self) -> Value {
        let mut v = json!({
            "major": "1", "minor": self.minor.to_string(),
            "gitVersion": format!("v1.{}.0", self.minor),
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean", "buildDate": self.build_date(),
            "goVersion": self.go_version(), "compiler": "gc", "platform": "linux/amd64"
        });
        if self.reports_compatibility_version() {
            v["emulationMajor"] = json!("1");
            v["emulationMinor"] = json!(self.minor.to_string());
            v["minCompatibilityMajor"] = json!("1");
            v["minCompatibilityMinor"] = json!((self.minor - 1).to_string());
        }
        v
    }

    /// `emulationMajor/Minor` and `minCompatibilityMajor/Minor` are in
    /// version.Info from 1.33 (kubernetes#130019, KEP-4330 compatibility
    /// versions); older servers send only the binary version.
    pub fn reports_compatibility_version(self) -> bool {
        self.at_least(33)
    }

    /// The day the release's .0 came out. (The time of day and the exact
    /// build date of upstream's binaries are not modelled.)
    fn build_date(self) -> &'static str {
        match self.minor {
            22 => "2021-08-04T00:00:00Z",
            23 => "2021-12-07T00:00:00Z",
            24 => "2022-05-03T00:00:00Z",
            25 => "2022-08-23T00:00:00Z",
            26 => "2022-12-08T00:00:00Z",
            27 => "2023-04-11T00:00:00Z",
            28 => "2023-08-15T00:00:00Z",
            29 => "2023-12-13T00:00:00Z",
            30 => "2024-04-17T00:00:00Z",
            31 => "2024-08-13T00:00:00Z",
            32 => "2024-12-11T00:00:00Z",
            33 => "2025-04-23T00:00:00Z",
            _ => "2025-08-27T00:00:00Z",
        }
    }

    /// The Go release the .0 was built with, as best known (the patch level
    /// is not checked against upstream's build logs; clients read only
    /// major/minor/gitVersion).
    fn go_version(self) -> &'static str {
        match self.minor {
            22 => "go1.16.6",
            23 => "go1.17.3",
            24 => "go1.18.1",
            25 => "go1.19",
            26 => "go1.19.4",
            27 => "go1.20.3",
            28 => "go1.20.7",
            29 => "go1.21.5",
            30 => "go1.22.2",
            31 => "go1.22.5",
            32 => "go1.23.3",
            33 => "go1.24.2",
            _ => "go1.24.6",
        }
    }

    // ------------------------------------------------------------ served API

    /// Whether the release serves this resource at this group/version (for
    /// routing and discovery). Every group/version the double implements
    /// went GA before 1.22, so this is true across the range; the table
    /// keeps it honest when a newer one is added.
    pub fn serves(self, def: &ResourceDef) -> bool {
        self.serves_with(&FeatureGates::default(), def)
    }

    /// [`Version::serves`] with `--feature-gates`: the DRA group's beta
    /// version only while its gate is on, and only until v1 replaced it.
    pub fn serves_with(self, gates: &FeatureGates, def: &ResourceDef) -> bool {
        match (def.group, def.version) {
            ("resource.k8s.io", "v1beta1") => {
                (32..=33).contains(&self.minor) && gates.dynamic_resource_allocation(self)
            }
            _ => self.at_least(served_since(def.group, def.version)),
        }
    }

    /// Whether the release, with its default feature gates, serves a
    /// subresource of `def` (for routing and discovery of `/api/v1`).
    pub fn serves_subresource(self, def: &ResourceDef, sub: &str) -> bool {
        self.serves_subresource_with(&FeatureGates::default(), def, sub)
    }

    /// [`Version::serves_subresource`] with the gates of `--feature-gates`.
    pub fn serves_subresource_with(
        self,
        gates: &FeatureGates,
        def: &ResourceDef,
        sub: &str,
    ) -> bool {
        match (def.group, def.plural, sub) {
            ("", "pods", "ephemeralcontainers") => self.serves_ephemeral_containers(),
            ("", "pods", "resize") => self.serves_pod_resize_with(gates),
            _ => true,
        }
    }

    /// `pods/ephemeralcontainers` is registered only while the
    /// EphemeralContainers gate is on (pkg/registry/core/rest/
    /// storage_core.go): alpha and off through 1.22, beta and on from 1.23,
    /// GA in 1.25 (KEP-277). With the gate off `spec.ephemeralContainers`
    /// is dropped on writes too (see [`fields`]). From 1.22 the subresource
    /// takes and returns a Pod (kubernetes#101034), so 1.23+ all share
    /// one shape.
    pub fn serves_ephemeral_containers(self) -> bool {
        self.at_least(23)
    }

    /// `pods/resize` is registered only while InPlacePodVerticalScaling is
    /// on (pkg/registry/core/rest/storage_core.go: `if
    /// utilfeature.DefaultFeatureGate.Enabled(features.InPlacePodVerticalScaling)
    /// { storage[resource+"/resize"] = podStorage.Resize }`); the
    /// subresource came in 1.32 (kubernetes#128266) with the gate still
    /// alpha and off, and the gate is beta and on from 1.33 (KEP-1287). With
    /// the default gates, then, from 1.33.
    pub fn serves_pod_resize(self) -> bool {
        self.serves_pod_resize_with(&FeatureGates::default())
    }

    /// [`Version::serves_pod_resize`] with `--feature-gates`: from 1.32
    /// when InPlacePodVerticalScaling is on.
    pub fn serves_pod_resize_with(self, gates: &FeatureGates) -> bool {
        self.at_least(32) && gates.in_place_resize(self)
    }

    // ------------------------------------------------------------ CSI

    /// The longest `spec.drivers[].nodeID` a CSINode write may carry
    /// (pkg/apis/storage/validation csiNodeIDMaxLength /
    /// csiNodeIDLongerMaxLength and the csinode strategy's
    /// AllowLongNodeID). 1.22 (kubernetes#101256) allows 192, or 256 on an
    /// update of a CSINode that already holds a longer ID; from 1.23
    /// (kubernetes#104563) the strategy always allows 256.
    pub fn csi_node_id_max_length(self, stored_has_longer: bool) -> usize {
        if self.at_least(23) || stored_has_longer {
            256
        } else {
            192
        }
    }

    // ------------------------------------------------------------ CSRs

    /// kube-controller-manager's csrapproving (sarapprove.go
    /// isNodeClientCert) and csrsigning (signer.go isKubeletClient /
    /// isKubeletServing) controllers check a kubelet CSR's usages with
    /// pkg/apis/certificates ValidateKubeletClientCSR /
    /// ValidateKubeletServingCSR. Through 1.24 the usages must be exactly
    /// {digital signature, key encipherment, client|server auth}; from 1.25
    /// the controllers also accept the set without "key encipherment"
    /// (kubernetes#111061 for issue #109077, "tolerate either set of usages
    /// for kubelet client and serving certificates"; the API defaulting
    /// followed in 1.27, kubernetes#111660).
    pub fn kubelet_csr_key_encipherment_optional(self) -> bool {
        self.at_least(25)
    }
}

/// The first release serving a group/version the double implements.
fn served_since(group: &str, version: &str) -> u32 {
    match (group, version) {
        // core/v1 predates every supported release.
        ("", _) => 0,
        // Lease v1: 1.14 (KEP-589 node heartbeats).
        ("coordination.k8s.io", "v1") => 14,
        // CSINode v1: 1.17; CSIDriver v1: 1.18. The group/version is served
        // from the first.
        ("storage.k8s.io", "v1") => 17,
        // events.k8s.io/v1 and certificates.k8s.io/v1: GA in 1.19.
        ("events.k8s.io", "v1") | ("certificates.k8s.io", "v1") => 19,
        // RuntimeClass v1: 1.20.
        ("node.k8s.io", "v1") => 20,
        // resource.k8s.io/v1 (DRA) is GA in 1.34; v1beta1 (1.32, 1.33) is
        // off by default as every beta API since 1.24 (see `serves_with`).
        ("resource.k8s.io", "v1") => 34,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_supported_range_only() {
        assert_eq!("1.22".parse::<Version>(), Ok(Version::new(22)));
        assert_eq!("v1.34".parse::<Version>(), Ok(Version::new(34)));
        for bad in ["1.21", "1.35", "abc", "2.28", "1", "1.x", ""] {
            let e = bad.parse::<Version>().expect_err(bad);
            assert!(e.contains("1.22 to 1.34"), "{bad}: {e}");
        }
        assert_eq!(Version::default(), Version::new(34));
        assert_eq!(Version::new(28).to_string(), "1.28");
    }

    #[test]
    fn version_info_by_release() {
        let old = Version::new(22).info();
        assert_eq!(
            (&old["major"], &old["minor"], &old["gitVersion"]),
            (&json!("1"), &json!("22"), &json!("v1.22.0"))
        );
        assert!(old.get("emulationMinor").is_none());
        let keys: Vec<&str> = old
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for k in [
            "major",
            "minor",
            "gitVersion",
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(keys.contains(&k), "{k}");
        }
        let new = Version::new(34).info();
        assert_eq!(new["gitVersion"], "v1.34.0");
        assert_eq!(new["emulationMinor"], "34");
        assert_eq!(new["minCompatibilityMinor"], "33");
    }

    /// ResourceClaims: GA v1 from 1.34 whatever the gate; the beta v1beta1
    /// on 1.32 and 1.33 only with DynamicResourceAllocation on.
    #[test]
    fn resource_claims_follow_the_release_and_the_gate() {
        let def = |v: &str| crate::resources::find("resource.k8s.io", v, "resourceclaims").unwrap();
        let on = FeatureGates::parse("DynamicResourceAllocation=true").unwrap();
        let off = FeatureGates::default();
        for minor in [22, 31] {
            assert!(
                !Version::new(minor).serves_with(&on, def("v1beta1")),
                "1.{minor}"
            );
        }
        for minor in [32, 33] {
            let v = Version::new(minor);
            assert!(!v.serves_with(&off, def("v1beta1")), "1.{minor} gate off");
            assert!(v.serves_with(&on, def("v1beta1")), "1.{minor} gate on");
            assert!(!v.serves_with(&on, def("v1")), "1.{minor} has no v1");
        }
        let v34 = Version::new(34);
        assert!(v34.serves(def("v1")));
        assert!(!v34.serves_with(&on, def("v1beta1")));
        assert!(on.check(Version::new(25)).is_err(), "no gate before 1.26");
    }
}
