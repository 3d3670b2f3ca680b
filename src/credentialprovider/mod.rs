//! Registry credentials from a pod's imagePullSecrets (upstream
//! `pkg/credentialprovider` and `pkg/credentialprovider/secrets`:
//! `MakeDockerKeyring` over `kubernetes.io/dockerconfigjson` and
//! `kubernetes.io/dockercfg` secrets, then `BasicDockerKeyring.Lookup`).
//!
//! Credentials never reach a log: [`RegistryAuth`]'s `Debug` redacts them
//! and errors name the secret and the offending key, not its content.

mod config;
mod keyring;
#[cfg(test)]
mod tests;

use std::fmt;

use k8s_openapi::api::core::v1::Secret;

use crate::cri::api;

pub use keyring::Keyring;

pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
pub const DOCKERCFG_KEY: &str = ".dockercfg";

/// One set of registry credentials (upstream `AuthConfig` as the keyring
/// fills it: username, password, email).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryAuth {
    pub username: String,
    pub password: String,
    pub email: String,
}

impl RegistryAuth {
    /// What PullImage carries (upstream copies username and password; the
    /// other AuthConfig fields stay empty for secret-sourced credentials).
    pub fn to_cri(&self) -> api::AuthConfig {
        api::AuthConfig {
            username: self.username.clone(),
            password: self.password.clone(),
            ..Default::default()
        }
    }
}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A pull secret that cannot be read; upstream fails the pull on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialError {
    pub namespace: String,
    pub name: String,
    /// What is wrong, without the secret's content.
    pub reason: String,
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pull secret {}/{}: {}",
            self.namespace, self.name, self.reason
        )
    }
}

impl std::error::Error for CredentialError {}

/// Builds the keyring of the secrets' docker configs (upstream
/// `secretsToTrackedDockerConfigs`). Secrets of other types, or without
/// their key, are skipped; one that does not parse is an error.
pub fn keyring(secrets: &[Secret]) -> Result<Keyring, CredentialError> {
    let mut ring = Keyring::default();
    for s in secrets {
        let ty = s.type_.as_deref().unwrap_or("");
        let data = |key: &str| {
            s.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.as_slice())
                .filter(|b| !b.is_empty())
        };
        let parsed = match (ty, data(DOCKER_CONFIG_JSON_KEY), data(DOCKERCFG_KEY)) {
            (SECRET_TYPE_DOCKER_CONFIG_JSON, Some(bytes), _) => {
                config::parse_dockerconfigjson(bytes)
                    .map_err(|e| format!("{DOCKER_CONFIG_JSON_KEY} {e}"))
            }
            (SECRET_TYPE_DOCKERCFG, _, Some(bytes)) => {
                config::parse_dockercfg(bytes).map_err(|e| format!("{DOCKERCFG_KEY} {e}"))
            }
            _ => continue,
        };
        let cfg = parsed.map_err(|reason| CredentialError {
            namespace: s.metadata.namespace.clone().unwrap_or_default(),
            name: s.metadata.name.clone().unwrap_or_default(),
            reason,
        })?;
        ring.add(&cfg);
    }
    Ok(ring)
}

/// The credentials to try for `image` (as written in the pod spec), in
/// upstream's order: most specific registry key first, secrets in the
/// order given. Empty when none applies (pull anonymously).
pub fn lookup(secrets: &[Secret], image: &str) -> Result<Vec<RegistryAuth>, CredentialError> {
    Ok(keyring(secrets)?.lookup(&keyring::repository(image)))
}
