//! Bearer tokens, including client-go's cached token file (re-read every
//! minute so a rotated projected/bootstrap token is picked up).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rkubelet_util::lock;

use super::Auth;

/// client-go's `NewCachedFileTokenSource` period.
const TOKEN_FILE_REREAD: Duration = Duration::from_secs(60);

pub(crate) enum TokenSource {
    None,
    Static(String),
    File(CachedTokenFile),
}

impl TokenSource {
    pub(crate) fn new(auth: Auth) -> TokenSource {
        match auth {
            Auth::None => TokenSource::None,
            Auth::Bearer(t) => TokenSource::Static(t),
            Auth::TokenFile(path) => TokenSource::File(CachedTokenFile::new(path)),
        }
    }

    /// The `Authorization` header value, if any.
    pub(crate) fn header(&self) -> Result<Option<String>, String> {
        match self {
            TokenSource::None => Ok(None),
            TokenSource::Static(t) => Ok(Some(format!("Bearer {t}"))),
            TokenSource::File(f) => f.token().map(|t| Some(format!("Bearer {t}"))),
        }
    }
}

pub(crate) struct CachedTokenFile {
    path: PathBuf,
    cached: Mutex<Option<(String, Instant)>>,
}

impl CachedTokenFile {
    fn new(path: PathBuf) -> CachedTokenFile {
        CachedTokenFile {
            path,
            cached: Mutex::new(None),
        }
    }

    /// The cached token while fresh; otherwise re-reads the file. A failed
    /// re-read keeps the last good token (logged), as client-go does.
    fn token(&self) -> Result<String, String> {
        let mut cached = lock(&self.cached);
        if let Some((token, at)) = cached.as_ref() {
            if at.elapsed() < TOKEN_FILE_REREAD {
                return Ok(token.clone());
            }
        }
        match read_token(&self.path) {
            Ok(token) => {
                *cached = Some((token.clone(), Instant::now()));
                Ok(token)
            }
            Err(e) => match cached.as_mut() {
                Some((token, at)) => {
                    log::warn!("{e}; using the previously read token");
                    *at = Instant::now();
                    Ok(token.clone())
                }
                None => Err(e),
            },
        }
    }
}

fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("token file {} is empty", path.display()));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_is_cached_and_survives_removal() {
        let dir = std::env::temp_dir().join(format!("rkubelet-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("token");
        std::fs::write(&path, "abc\n").expect("write");
        let src = TokenSource::new(Auth::TokenFile(path.clone()));
        assert_eq!(src.header(), Ok(Some("Bearer abc".to_string())));
        std::fs::remove_file(&path).expect("rm");
        // Within the period the cached value is used without touching the file.
        assert_eq!(src.header(), Ok(Some("Bearer abc".to_string())));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_token_file_is_an_error() {
        let src = TokenSource::new(Auth::TokenFile("/nonexistent/rkubelet/token".into()));
        let err = src.header().expect_err("no file");
        assert!(err.contains("/nonexistent/rkubelet/token"), "{err}");
    }
}
