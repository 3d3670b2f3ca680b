//! The kubelet's ID range: upstream's default, MakeUserNsManager's checks
//! (TestMakeUserNsManager) and the getsubids / subuid parsers.

use super::range::{has_account, KUBELET_USER};
use super::*;

fn err_text<T: std::fmt::Debug>(r: Result<T, UsernsError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_default_range_is_every_id_from_65536() {
    let r = IdRange::default_range();
    assert_eq!((r.first, r.len), (65536, 4_294_901_760));
    assert_eq!(u64::from(r.first) + u64::from(r.len), 1 << 32);
    r.validate(110).unwrap();
    assert_eq!(r.len / USERNS_LENGTH, 65535);
}

#[test]
fn validate_refuses_as_make_user_ns_manager() {
    let range = |first: u32, len: u32| IdRange { first, len };
    let cases = [
        (
            range(65537, 65536),
            0,
            "kubelet user assigned ID 65537 is not a multiple of 65536",
        ),
        (
            range(1, 65536),
            0,
            "kubelet user assigned ID 1 is not a multiple of 65536",
        ),
        (
            range(0, 65536),
            0,
            "kubelet user assigned ID 0 must be greater or equal to 65536",
        ),
        (
            range(65536, 65537),
            0,
            "kubelet user assigned IDs length 65537 is not a multiple of 65536",
        ),
        (
            range(65536, 65536),
            2,
            "kubelet user assigned IDs are not enough to support 2 pods",
        ),
    ];
    for (r, max_pods, want) in cases {
        assert_eq!(err_text(r.validate(max_pods)), want);
    }
    range(65536, 65536).validate(1).unwrap();
    range(65536, 2000 * 65536).validate(110).unwrap();
    // A range past 2^32 is accepted, as upstream accepts it.
    range(327_680, 4_294_836_224).validate(110).unwrap();
}

#[test]
fn the_manager_refuses_a_bad_range() {
    let dir = std::env::temp_dir().join("rkubelet-userns-never-created");
    let bad = IdRange {
        first: 65536,
        len: 65536,
    };
    let err = match UsernsManager::with_max_pods(dir, bad, 110) {
        Ok(_) => panic!("the manager was built"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        err,
        "kubelet user assigned IDs are not enough to support 110 pods"
    );
}

#[test]
fn getsubids_output_is_one_line_of_four_fields() {
    let r = IdRange::parse_getsubids_output("0: kubelet 65536 2147483648\n").unwrap();
    assert_eq!(
        r,
        IdRange {
            first: 65536,
            len: 2_147_483_648
        }
    );
    let two = "0: kubelet 65536 65536\n1: kubelet 131072 65536\n";
    assert_eq!(
        err_text(IdRange::parse_getsubids_output(two)),
        r#"error parsing line "0: kubelet 65536 65536\n1: kubelet 131072 65536\n": it must contain only one line"#
    );
    assert_eq!(
        err_text(IdRange::parse_getsubids_output("0: kubelet 65536")),
        r#"invalid line "0: kubelet 65536""#
    );
    assert_eq!(
        err_text(IdRange::parse_getsubids_output("")),
        r#"invalid line """#
    );
    assert_eq!(
        err_text(IdRange::parse_getsubids_output("0: kubelet x 65536")),
        r#"error parsing line "0: kubelet x 65536": strconv.ParseUint: parsing "x": invalid syntax"#
    );
    assert_eq!(
        err_text(IdRange::parse_getsubids_output(
            "0: kubelet 65536 4294967296"
        )),
        r#"error parsing line "0: kubelet 65536 4294967296": strconv.ParseUint: parsing "4294967296": value out of range"#
    );
    assert_eq!(
        err_text(IdRange::parse_getsubids_output("0: kubelet +65536 65536")),
        r#"error parsing line "0: kubelet +65536 65536": strconv.ParseUint: parsing "+65536": invalid syntax"#
    );
}

#[test]
fn both_getsubids_answers_must_agree() {
    let line = b"0: kubelet 131072 131072\n";
    let r = IdRange::from_getsubids_outputs(line, line).unwrap();
    assert_eq!(
        r,
        IdRange {
            first: 131072,
            len: 131072
        }
    );
    assert_eq!(
        err_text(IdRange::from_getsubids_outputs(
            line,
            b"0: kubelet 65536 65536\n"
        )),
        r#"mismatched subuids and subgids for user "kubelet""#
    );
}

#[test]
fn without_a_kubelet_account_the_default_range_is_used() {
    let dir = std::env::temp_dir().join(format!("rkubelet-userns-passwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let passwd = dir.join("passwd");
    std::fs::write(
        &passwd,
        "root:x:0:0:root:/root:/bin/sh\nkubeletx:x:5:5::/:/bin/false\n",
    )
    .unwrap();
    let empty_path = std::ffi::OsString::from(dir.join("bin"));
    let got = IdRange::kubelet_mappings_from(&passwd, Some(&empty_path)).unwrap();
    assert_eq!(got, IdRange::default_range());
    let missing = dir.join("no-passwd");
    let got = IdRange::kubelet_mappings_from(&missing, Some(&empty_path)).unwrap();
    assert_eq!(got, IdRange::default_range());

    // With the account and no getsubids, v1.34 fails.
    std::fs::write(
        &passwd,
        "root:x:0:0::/:/bin/sh\nkubelet:x:999:999::/:/bin/false\n",
    )
    .unwrap();
    let err = err_text(IdRange::kubelet_mappings_from(&passwd, Some(&empty_path)));
    assert_eq!(
        err,
        r#"exec: "getsubids": executable file not found in $PATH"#
    );
    let wrapped = UsernsError::KubeletMappings(Box::new(UsernsError::ExecutableNotFound {
        name: "getsubids".to_string(),
    }));
    assert_eq!(
        wrapped.to_string(),
        r#"kubelet mappings: exec: "getsubids": executable file not found in $PATH"#
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn passwd_accounts_are_matched_by_whole_name() {
    let text = "# comment\nroot:x:0:0::/:/bin/sh\n  kubelet:x:1:1::/:/bin/false\n";
    assert!(has_account(text, KUBELET_USER));
    assert!(!has_account("kubelets:x:1:1::/:/bin/false\n", KUBELET_USER));
    assert!(!has_account("", KUBELET_USER));
}
