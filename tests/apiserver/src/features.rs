//! `--feature-gates Name=bool,...`: the kube-apiserver feature gates the
//! double can emulate being set away from their default, so a test can run
//! what a cluster with an alpha gate turned on would do.
//!
//! Only the gates that change something the double models are known; any
//! other name is refused as upstream's `featuregate.Set` refuses one it does
//! not know (`unrecognized feature gate: X`), and so is a known gate at a
//! release that predates it (the gate is not in that release's table).
//!
//! * `InPlacePodVerticalScaling` (KEP-1287; pkg/features/kube_features.go):
//!   alpha and off from 1.27, beta and on from 1.33 (GA in 1.35, beyond the
//!   emulated range). It decides whether `pods/resize` is served (1.32+),
//!   whether a plain pod update may change cpu/memory (1.27–1.31), and
//!   whether the resize fields of the pod survive a write (see
//!   `version::fields`).
//! * `InPlacePodVerticalScalingAllocatedStatus`: alpha and off in 1.32 only
//!   (deprecated and unused from 1.33): in 1.32 the container statuses'
//!   `allocatedResources` survive a write only with both gates on.
//! * `DynamicResourceAllocation` (KEP-4381): beta and off in 1.32 and 1.33,
//!   GA in 1.34. With it on, 1.32 and 1.33 serve `resource.k8s.io/v1beta1`
//!   ResourceClaims (a real server also needs `--runtime-config
//!   resource.k8s.io/v1beta1=true`, which the double takes as implied);
//!   1.34 serves `resource.k8s.io/v1` whatever the gate.
//! * `ImageVolume` (KEP-4639): alpha and off from 1.31, beta and still off
//!   in 1.33 and 1.34. While off, a pod's `image` volumes and the mounts of
//!   them are dropped (dropImageVolumes).

use crate::version::Version;

pub const IN_PLACE_POD_VERTICAL_SCALING: &str = "InPlacePodVerticalScaling";
pub const IN_PLACE_ALLOCATED_STATUS: &str = "InPlacePodVerticalScalingAllocatedStatus";
pub const DYNAMIC_RESOURCE_ALLOCATION: &str = "DynamicResourceAllocation";
pub const IMAGE_VOLUME: &str = "ImageVolume";

/// The gates set on the command line; `None` is the release's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeatureGates {
    in_place: Option<bool>,
    allocated_status: Option<bool>,
    dra: Option<bool>,
    image_volume: Option<bool>,
}

/// The release and gates a request is answered as: what every
/// release-dependent decision of the write path needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Emulation {
    pub version: Version,
    pub gates: FeatureGates,
}

impl FeatureGates {
    /// Parses `A=true,B=false` (pflag's mapStringBool form, as
    /// kube-apiserver's `--feature-gates`). Names are checked against the
    /// release later, by [`FeatureGates::check`], because the flag may come
    /// before `--emulate-version`.
    pub fn parse(spec: &str) -> Result<FeatureGates, String> {
        let mut g = FeatureGates::default();
        g.merge(spec)?;
        Ok(g)
    }

    /// Adds the gates of one more `--feature-gates` (a repeated flag adds
    /// to the earlier ones, as pflag's map flags do).
    pub fn merge(&mut self, spec: &str) -> Result<(), String> {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("missing bool value for {part}"))?;
            let on = parse_bool(value.trim()).ok_or_else(|| {
                format!("invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax")
            })?;
            self.set(name.trim(), on)?;
        }
        Ok(())
    }

    /// Sets one gate by name.
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), String> {
        match name {
            IN_PLACE_POD_VERTICAL_SCALING => self.in_place = Some(on),
            IN_PLACE_ALLOCATED_STATUS => self.allocated_status = Some(on),
            DYNAMIC_RESOURCE_ALLOCATION => self.dra = Some(on),
            IMAGE_VOLUME => self.image_volume = Some(on),
            other => return Err(format!("unrecognized feature gate: {other}")),
        }
        Ok(())
    }

    /// Refuses a gate the release does not have yet.
    pub fn check(&self, v: Version) -> Result<(), String> {
        let set = [
            (IN_PLACE_POD_VERTICAL_SCALING, self.in_place, 27),
            (IN_PLACE_ALLOCATED_STATUS, self.allocated_status, 32),
            (DYNAMIC_RESOURCE_ALLOCATION, self.dra, 26),
            (IMAGE_VOLUME, self.image_volume, 31),
        ];
        for (name, value, since) in set {
            if value.is_some() && !v.at_least(since) {
                return Err(format!(
                    "unrecognized feature gate: {name} (added in 1.{since}, emulating {v})"
                ));
            }
        }
        Ok(())
    }

    /// InPlacePodVerticalScaling: set, or on by default from 1.33; never on
    /// before 1.27 (the gate does not exist there).
    pub fn in_place_resize(&self, v: Version) -> bool {
        v.at_least(27) && self.in_place.unwrap_or(v.at_least(33))
    }

    /// DynamicResourceAllocation: set, or on from 1.34 (GA); 1.26 to 1.33
    /// had the older API versions the double does not serve before 1.32.
    pub fn dynamic_resource_allocation(&self, v: Version) -> bool {
        v.at_least(26) && (v.at_least(34) || self.dra.unwrap_or(false))
    }

    /// ImageVolume: only when set (off by default through 1.34).
    pub fn image_volume(&self, v: Version) -> bool {
        v.at_least(31) && self.image_volume.unwrap_or(false)
    }

    /// Whether container statuses keep `allocatedResources`: with
    /// InPlacePodVerticalScaling on, and in 1.32 only with
    /// InPlacePodVerticalScalingAllocatedStatus on as well
    /// (dropDisabledPodStatusFields, pkg/api/pod/util.go).
    pub fn allocated_resources(&self, v: Version) -> bool {
        let allocated_gate = v.minor != 32 || self.allocated_status.unwrap_or(false);
        self.in_place_resize(v) && allocated_gate
    }
}

impl Emulation {
    pub fn new(version: Version, gates: FeatureGates) -> Emulation {
        Emulation { version, gates }
    }

    pub fn in_place_resize(&self) -> bool {
        self.gates.in_place_resize(self.version)
    }
}

/// strconv.ParseBool.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_defaults_follow_the_release() {
        let off = FeatureGates::default();
        assert!(!off.in_place_resize(Version::new(26)));
        assert!(!off.in_place_resize(Version::new(32)));
        assert!(off.in_place_resize(Version::new(33)));
        assert!(!off.allocated_resources(Version::new(32)));
        assert!(off.allocated_resources(Version::new(34)));
    }

    #[test]
    fn parses_and_checks_like_kube_apiserver() {
        let g = FeatureGates::parse("InPlacePodVerticalScaling=true").expect("parse");
        assert!(g.in_place_resize(Version::new(27)));
        assert!(g.check(Version::new(27)).is_ok());
        let e = g
            .check(Version::new(26))
            .expect_err("1.26 has no such gate");
        assert!(e.starts_with("unrecognized feature gate: InPlacePodVerticalScaling"));
        assert!(
            !g.allocated_resources(Version::new(32)),
            "needs both in 1.32"
        );
        let both = FeatureGates::parse(
            "InPlacePodVerticalScaling=true, InPlacePodVerticalScalingAllocatedStatus=true",
        )
        .expect("parse");
        assert!(both.allocated_resources(Version::new(32)));
        let off = FeatureGates::parse("InPlacePodVerticalScaling=false").expect("parse");
        assert!(!off.in_place_resize(Version::new(34)));
        assert_eq!(
            FeatureGates::parse("Foo=true"),
            Err("unrecognized feature gate: Foo".into())
        );
        assert!(FeatureGates::parse("InPlacePodVerticalScaling").is_err());
        assert!(FeatureGates::parse("InPlacePodVerticalScaling=yes").is_err());
    }
}
