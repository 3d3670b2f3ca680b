//! What the kubelet's ports do with a request (upstream Server.ServeHTTP
//! and the auth filter): count it, authenticate and authorize it on 10250,
//! then route it to its handler.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::auth::{Auth, Decision, UserInfo};
use super::routes::{not_found, Route, Router};
use super::tls::subject_user;
use super::{Request, ResponseWriter};

/// Port 10250 (with `auth`) or the read-only port (without).
pub(crate) struct KubeletService {
    /// None on the read-only port.
    pub auth: Option<Arc<Auth>>,
    pub router: Router,
}

impl rkubelet_http::Service for KubeletService {
    /// The user a verified client certificate names (x509 authentication).
    type Peer = Option<UserInfo>;
    type User = UserInfo;

    fn connected(&self, client_cert: Option<&[u8]>) -> Option<UserInfo> {
        client_cert.and_then(|der| {
            // rustls has verified it: an error means x509-parser disagrees
            // with webpki; the request goes on as if no certificate was sent.
            subject_user(der)
                .inspect_err(|e| log::warn!("verified client certificate: {e}"))
                .ok()
                .flatten()
        })
    }

    fn serve(
        &self,
        cert_user: &Option<UserInfo>,
        req: &mut Request,
        resp: &mut ResponseWriter<'_>,
    ) -> io::Result<()> {
        // Upstream's ServeHTTP counts every request, refused ones included.
        let server_type = if self.auth.is_some() {
            "readwrite"
        } else {
            "readonly"
        };
        let _metrics = crate::metrics::http_request_start(req.method(), req.path(), server_type);
        match self.admit(req, cert_user.as_ref()) {
            Some((code, text)) => resp.send_text(code, &text),
            None => dispatch(&self.router, req, resp),
        }
    }
}

impl KubeletService {
    /// Authenticates and authorizes; Some((code, body)) refuses the request.
    fn admit(&self, req: &mut Request, cert_user: Option<&UserInfo>) -> Option<(u16, String)> {
        let auth = self.auth.as_ref()?;
        let user = match auth.authenticate(cert_user, req.headers()) {
            Ok(Some(u)) => u,
            Ok(None) => return Some((401, "Unauthorized".into())),
            Err(e) => {
                log::info!("unable to authenticate the request: {e}");
                return Some((401, "Unauthorized".into()));
            }
        };
        let decision = auth.authorize(&user, req.method(), req.path());
        req.set_user(user);
        match decision {
            Decision::Allow => None,
            Decision::Forbidden(msg) => Some((403, msg)),
            Decision::Error(msg) => Some((500, msg)),
        }
    }
}

/// Runs the route's handler; a panic becomes a 500 when nothing was sent.
fn dispatch(router: &Router, req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
    match router.route(req.path()) {
        Route::Handler(h) => {
            let run = catch_unwind(AssertUnwindSafe(|| h.handle(req, resp)));
            run.unwrap_or_else(|_| {
                log::error!("handler for {} {} panicked", req.method(), req.path());
                Err(io::Error::other("handler panicked"))
            })
        }
        Route::Redirect(to) => {
            let location = match req.target().split_once('?') {
                Some((_, q)) => format!("{to}?{q}"),
                None => to,
            };
            resp.set_header("Location", &location);
            resp.send(301, "", &[])
        }
        Route::NotFound => not_found(resp),
    }
}
