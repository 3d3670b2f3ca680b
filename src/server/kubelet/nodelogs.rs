//! `/logs/`: files and directory listings under the node log directory, as
//! Go's http.FileServer serves them for upstream's ServeLogs. `..` segments
//! are refused (400) and symlinks leading outside the directory are not
//! followed (404).

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use super::routes::{method_not_allowed, not_found};
use super::{Handler, Request, ResponseWriter};

pub(crate) struct NodeLogs {
    pub root: PathBuf,
}

/// Go's containsDotDot: any `..` path element.
fn contains_dot_dot(path: &str) -> bool {
    path.split(['/', '\\']).any(|seg| seg == "..")
}

impl Handler for NodeLogs {
    fn handle(&self, req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
        if req.method() != "GET" {
            return method_not_allowed(resp, "GET");
        }
        let url_path = req.path().to_string();
        if contains_dot_dot(&url_path) {
            return resp.send_text(400, "invalid URL path");
        }
        let rel = url_path.strip_prefix("/logs/").unwrap_or("");
        let Some(target) = self.resolve(rel) else {
            return not_found(resp);
        };
        let meta = match fs::metadata(&target) {
            Ok(m) => m,
            Err(e) => return fs_error(resp, &e),
        };
        let base = url_path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("");
        match (meta.is_dir(), url_path.ends_with('/')) {
            (true, false) => redirect(resp, &format!("{}/", escape_path(base))),
            (false, true) => redirect(resp, &format!("../{}", escape_path(base))),
            (true, true) => list_dir(resp, &target),
            (false, false) => serve_file(resp, &target, meta.len()),
        }
    }
}

impl NodeLogs {
    /// The real path of `rel` under the root, or None if it leaves the root.
    fn resolve(&self, rel: &str) -> Option<PathBuf> {
        let rel = Path::new(rel);
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return None;
        }
        let root = fs::canonicalize(&self.root).ok()?;
        let real = fs::canonicalize(root.join(rel)).ok()?;
        real.starts_with(&root).then_some(real)
    }
}

fn fs_error(resp: &mut ResponseWriter<'_>, e: &io::Error) -> io::Result<()> {
    match e.kind() {
        io::ErrorKind::PermissionDenied => resp.send_text(403, "403 Forbidden"),
        io::ErrorKind::NotFound => not_found(resp),
        _ => resp.send_text(500, "500 Internal Server Error"),
    }
}

fn redirect(resp: &mut ResponseWriter<'_>, location: &str) -> io::Result<()> {
    resp.set_header("Location", location);
    resp.send(301, "", &[])
}

/// A relative URL path for a file name (Go's url.URL{Path: name}.String()).
fn escape_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        let keep = b.is_ascii_alphanumeric() || b"-._~$&+,/:;=@!'()*".contains(&b);
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Go's dirList: sorted names, directories with a trailing slash.
fn list_dir(resp: &mut ResponseWriter<'_>, dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return fs_error(resp, &e),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| {
            let mut name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                name.push('/');
            }
            name
        })
        .collect();
    names.sort();
    let mut body = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for n in &names {
        body.push_str(&format!(
            "<a href=\"{}\">{}</a>\n",
            escape_path(n),
            escape_html(n)
        ));
    }
    body.push_str("</pre>\n");
    resp.send(200, "text/html; charset=utf-8", body.as_bytes())
}

/// Text when the first bytes hold no NUL and decode as UTF-8 (a cut
/// character at the end is allowed).
fn content_type(path: &Path, head: &[u8]) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => return "text/html; charset=utf-8",
        Some("json") => return "application/json",
        Some("gz") => return "application/gzip",
        _ => {}
    }
    let text = !head.contains(&0)
        && match std::str::from_utf8(head) {
            Ok(_) => true,
            Err(e) => e.error_len().is_none(),
        };
    if text {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    }
}

/// The file's first `len` bytes (its size when opened), streamed.
fn serve_file(resp: &mut ResponseWriter<'_>, path: &Path, len: u64) -> io::Result<()> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) => return fs_error(resp, &e),
    };
    let mut head = [0u8; 512];
    let n = f.read(&mut head)?;
    f.seek(SeekFrom::Start(0))?;
    resp.set_header("Content-Type", content_type(path, &head[..n]));
    resp.set_header("Content-Length", &len.to_string());
    resp.set_header("Accept-Ranges", "none");
    let copied = io::copy(&mut f.take(len), resp)?;
    if copied < len {
        // Truncated while serving: the connection closes short of the length.
        log::debug!("{} shrank while served", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert!(contains_dot_dot("/logs/../etc"));
        assert!(contains_dot_dot("/logs/a/.."));
        assert!(!contains_dot_dot("/logs/a..b"));
        assert_eq!(escape_path("a b?#.log"), "a%20b%3F%23.log");
        assert_eq!(escape_html("<a&'\">"), "&lt;a&amp;&#39;&#34;&gt;");
        assert_eq!(
            content_type(Path::new("x.log"), b"hello"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            content_type(Path::new("wtmp"), b"\0\x01"),
            "application/octet-stream"
        );
    }
}
