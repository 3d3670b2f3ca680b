//! Mirrors upstream `keyring_test.go`, `config_test.go` and `secrets_test.go`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use super::keyring::{glob_match, is_default_registry_match, repository, urls_match_str};
use super::*;

fn auth(user: &str, pass: &str) -> RegistryAuth {
    RegistryAuth {
        username: user.into(),
        password: pass.into(),
        email: String::new(),
    }
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn secret(name: &str, ty: &str, key: &str, data: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        type_: Some(ty.into()),
        data: Some(BTreeMap::from([(
            key.to_string(),
            ByteString(data.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

fn json_secret(name: &str, auths: &str) -> Secret {
    secret(
        name,
        SECRET_TYPE_DOCKER_CONFIG_JSON,
        DOCKER_CONFIG_JSON_KEY,
        &format!("{{\"auths\": {auths}}}"),
    )
}

fn ring(entries: &[(&str, &str, &str)]) -> Keyring {
    let mut k = Keyring::default();
    let cfg: Vec<(String, RegistryAuth)> = entries
        .iter()
        .map(|(reg, u, p)| (reg.to_string(), auth(u, p)))
        .collect();
    k.add(&cfg);
    k
}

fn users(v: &[RegistryAuth]) -> Vec<&str> {
    v.iter().map(|a| a.username.as_str()).collect()
}

#[test]
fn urls_match_table() {
    let cases = [
        ("*.kubernetes.io", "prefix.kubernetes.io", true),
        ("prefix.*.io", "prefix.kubernetes.io", true),
        ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
        ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
        ("*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true),
        ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true),
        (
            "*.kubernetes.io:1111/blah",
            "prefix.kubernetes.io:1111/blah",
            true,
        ),
        (
            "prefix.*.io:1111/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            true,
        ),
        ("prefix.[j-l]ubernetes.io", "prefix.kubernetes.io", true),
        ("prefix.[a-j]ubernetes.io", "prefix.kubernetes.io", false),
        // Go's url.Parse rejects these hosts, so they never match.
        ("[a-p]refix.kubernetes.io", "prefix.kubernetes.io", false),
        ("prefix.[^a-j]ubernetes.io", "prefix.kubernetes.io", false),
        ("*.core.windows.net", "kubernetes.io", false),
        ("*.kubernetes.io", "kubernetes.io", false),
        ("*.*.kubernetes.io", "prefix.kubernetes.io", false),
        ("*.kubernetes.io", "kubernetes.io/foo", false),
        ("*kubernetes.io", "a.kubernetes.io", false),
        ("*.kubernetes.io/blah", "prefix.kubernetes.io/other", false),
        (
            "*.kubernetes.io:1234/blah",
            "prefix.kubernetes.io:1111/blah",
            false,
        ),
        (
            "prefix.*.io/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            false,
        ),
        ("prefix.kubernetes.io:1111", "prefix.kubernetes.io", false),
        ("[bad.kubernetes.io", "[bad.kubernetes.io", false),
        // As with Go's url.Parse, '?' starts the query: the host is "p".
        ("p?efix.kubernetes.io", "prefix.kubernetes.io", false),
    ];
    for (glob, target, want) in cases {
        assert_eq!(urls_match_str(glob, target), want, "{glob} vs {target}");
    }
}

#[test]
fn glob_is_filepath_match() {
    assert_eq!(glob_match(b"a*c", b"abbbc"), Some(true));
    assert_eq!(glob_match(b"a\\*c", b"a*c"), Some(true));
    assert_eq!(glob_match(b"a\\*c", b"abc"), Some(false));
    assert_eq!(glob_match(b"[]a]", b"a"), None);
    assert_eq!(glob_match(b"[z-a]", b"b"), None);
}

#[test]
fn keys_are_normalised() {
    // Scheme, /v1/ and /v2/ prefixes and a bare "/" path are dropped.
    let k = ring(&[
        ("https://index.docker.io/v1/", "hub", "p"),
        ("http://quay.io/v2/coreos", "coreos", "p"),
        ("registry.example.com/", "example", "p"),
    ]);
    assert_eq!(users(&k.lookup("docker.io/library/busybox")), ["hub"]);
    assert_eq!(users(&k.lookup("quay.io/coreos/etcd")), ["coreos"]);
    assert!(k.lookup("quay.io/other/etcd").is_empty());
    assert_eq!(users(&k.lookup("registry.example.com/a/b")), ["example"]);
}

#[test]
fn most_specific_first() {
    // Upstream TestDockerKeyringLookup: reverse-sorted keys.
    let k = ring(&[
        ("bar.example.com/pong", "grace", "squash"),
        ("bar.example.com", "amanda", "bananas"),
    ]);
    assert_eq!(
        users(&k.lookup("bar.example.com/pong")),
        ["grace", "amanda"]
    );
    assert_eq!(users(&k.lookup("bar.example.com/ping")), ["amanda"]);
    assert_eq!(
        users(&k.lookup("bar.example.com/pongz")),
        ["grace", "amanda"],
        "a path key is a string prefix, as upstream"
    );
    assert!(k.lookup("foo.example.com/bar").is_empty());
    assert!(
        k.lookup("bar.example.com:5000/pong").is_empty(),
        "ports must match"
    );
}

#[test]
fn port_and_glob_keys() {
    // Upstream TestIssue3797 and TestDockerKeyringForGlob.
    let k = ring(&[
        ("https://quay.io:5000/v1/", "ported", "p"),
        ("*.docker.io", "glob", "p"),
        ("*.example.com/images", "images", "p"),
    ]);
    assert_eq!(users(&k.lookup("quay.io:5000/foo/bar")), ["ported"]);
    assert!(k.lookup("quay.io/foo/bar").is_empty());
    assert_eq!(users(&k.lookup("registry-1.docker.io/a/b")), ["glob"]);
    assert_eq!(users(&k.lookup("a.example.com/images/x")), ["images"]);
    assert!(k.lookup("a.example.com/other/x").is_empty());
}

#[test]
fn docker_hub_defaults() {
    // Upstream TestKeyringHitWithUnqualifiedDockerHub and friends.
    let k = ring(&[("https://index.docker.io/v1/", "hub", "p")]);
    for image in [
        "busybox",
        "library/busybox",
        "user/img",
        "docker.io/user/img",
    ] {
        assert_eq!(
            users(&k.lookup(&repository(image))),
            ["hub"],
            "{image} is a Docker Hub image"
        );
    }
    assert!(k.lookup(&repository("quay.io/user/img")).is_empty());
    // A "docker.io" key matches docker.io repositories directly.
    let k = ring(&[("docker.io", "short", "p")]);
    assert_eq!(users(&k.lookup(&repository("busybox:1.36"))), ["short"]);
    // Non-Hub keys do not leak to Hub images.
    let k = ring(&[("quay.io", "q", "p")]);
    assert!(k.lookup(&repository("busybox")).is_empty());
}

#[test]
fn default_registry_match() {
    let cases = [
        ("foo", true),
        ("foo/bar", true),
        ("docker.io/foo", true),
        ("index.docker.io/foo", true),
        ("localhost:5000/foo", false),
        ("quay.io/foo", false),
        ("/foo", false),
        ("", false),
    ];
    for (image, want) in cases {
        assert_eq!(is_default_registry_match(image), want, "{image}");
    }
}

#[test]
fn repositories_are_normalised() {
    assert_eq!(repository("busybox"), "docker.io/library/busybox");
    assert_eq!(repository("busybox:1.36"), "docker.io/library/busybox");
    assert_eq!(repository("user/img@sha256:ab"), "docker.io/user/img");
    assert_eq!(repository("index.docker.io/user/img"), "docker.io/user/img");
    assert_eq!(repository("localhost:5000/a/b:v1"), "localhost:5000/a/b");
    assert_eq!(repository("quay.io/a/b:v1"), "quay.io/a/b");
    assert_eq!(repository("localhost/img"), "localhost/img");
}

#[test]
fn dockerconfigjson_and_dockercfg_secrets() {
    let a = json_secret(
        "json",
        &format!(
            "{{\"quay.io\": {{\"auth\": \"{}\", \"email\": \"a@b\"}}}}",
            b64("joe:s3:cret")
        ),
    );
    let b = secret(
        "legacy",
        SECRET_TYPE_DOCKERCFG,
        DOCKERCFG_KEY,
        "{\"https://quay.io\": {\"username\": \"ann\", \"password\": \"pw\"}}",
    );
    let got = lookup(&[a, b], "quay.io/org/img:v1").unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0],
        RegistryAuth {
            username: "joe".into(),
            password: "s3:cret".into(),
            email: "a@b".into(),
        }
    );
    assert_eq!(got[1], auth("ann", "pw"));
    let cri = got[0].to_cri();
    assert_eq!(
        (cri.username.as_str(), cri.password.as_str()),
        ("joe", "s3:cret")
    );
}

#[test]
fn auth_overrides_username_and_password() {
    let s = json_secret(
        "s",
        &format!(
            "{{\"quay.io\": {{\"Username\": \"x\", \"Password\": \"y\", \"auth\": \"{}\"}}}}",
            b64("u:p").trim_end_matches('=')
        ),
    );
    assert_eq!(lookup(&[s], "quay.io/a").unwrap(), [auth("u", "p")]);
}

#[test]
fn wrong_type_or_key_is_ignored() {
    let opaque = secret("o", "Opaque", DOCKER_CONFIG_JSON_KEY, "not json");
    let swapped = secret(
        "w",
        SECRET_TYPE_DOCKERCFG,
        DOCKER_CONFIG_JSON_KEY,
        "not json",
    );
    let empty = secret(
        "e",
        SECRET_TYPE_DOCKER_CONFIG_JSON,
        DOCKER_CONFIG_JSON_KEY,
        "",
    );
    assert_eq!(lookup(&[opaque, swapped, empty], "busybox").unwrap(), []);
    let no_auths = secret(
        "n",
        SECRET_TYPE_DOCKER_CONFIG_JSON,
        DOCKER_CONFIG_JSON_KEY,
        "{}",
    );
    assert_eq!(lookup(&[no_auths], "busybox").unwrap(), []);
}

#[test]
fn bad_secrets_are_errors_naming_the_secret() {
    let cases = [
        json_secret("badb64", "{\"quay.io\": {\"auth\": \"!!!hunter2\"}}"),
        json_secret(
            "nocolon",
            &format!("{{\"quay.io\": {{\"auth\": \"{}\"}}}}", b64("hunter2")),
        ),
        secret(
            "badjson",
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            DOCKER_CONFIG_JSON_KEY,
            "{\"auths\": {\"quay.io\": {\"password\": \"hunter2\"",
        ),
        json_secret("badtype", "{\"quay.io\": {\"password\": 42}}"),
        json_secret("notobject", "[\"hunter2\"]"),
        secret("cfgarray", SECRET_TYPE_DOCKERCFG, DOCKERCFG_KEY, "[1]"),
    ];
    for s in cases {
        let name = s.metadata.name.clone().unwrap();
        let err = lookup(&[s], "quay.io/a").expect_err(&name);
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("pull secret default/{name}: ")),
            "{msg}"
        );
        assert!(!msg.contains("hunter2"), "secret content leaked: {msg}");
        assert_eq!(err.name, name);
    }
}

#[test]
fn unparsable_keys_are_skipped() {
    let s = json_secret(
        "s",
        "{\"quay.io:abc\": {\"username\": \"bad\"}, \"quay.io\": {\"username\": \"good\"}}",
    );
    assert_eq!(users(&lookup(&[s], "quay.io/a").unwrap()), ["good"]);
}

#[test]
fn debug_redacts_the_password() {
    let text = format!("{:?}", auth("joe", "hunter2"));
    assert!(text.contains("joe") && !text.contains("hunter2"), "{text}");
}
