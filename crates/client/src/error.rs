//! API errors: the apiserver's v1 Status mapped to a Rust enum (apimachinery's
//! `errors.StatusError` and its `Is*` helpers).

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;

/// An error from one API request. Every variant names the request
/// (`"PATCH /api/v1/..."`) so a log line says what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// The server answered with an error status (a v1 Status, or a plain body).
    Status {
        code: u16,
        reason: String,
        message: String,
        /// `"VERB path"`; empty when not known.
        request: String,
    },
    /// The request failed below HTTP (DNS, connect, TLS, timeout, broken stream),
    /// or was refused by the client itself (rate limiter, token file).
    /// The text begins with `"VERB path: "`.
    Transport(String),
    /// A response or watch event could not be decoded. The text begins with `"VERB path: "`.
    Decode(String),
}

impl ApiError {
    /// A Status error without request context (for fakes and tests).
    pub fn status(code: u16, reason: &str, message: &str) -> ApiError {
        ApiError::Status {
            code,
            reason: reason.to_string(),
            message: message.to_string(),
            request: String::new(),
        }
    }

    /// Maps an error response: a v1 Status body when there is one, else the
    /// HTTP code with the body text, as client-go's `NewGenericServerResponse` does.
    pub(crate) fn from_response(code: u16, body: &[u8], request: &str) -> ApiError {
        match serde_json::from_slice::<Status>(body) {
            Ok(status) if status.reason.is_some() || status.message.is_some() => {
                Self::from_status(&status, code, request)
            }
            _ => ApiError::Status {
                code,
                reason: reason_for_code(code).to_string(),
                message: body_text(code, body),
                request: request.to_string(),
            },
        }
    }

    /// A v1 Status (from a body or a watch ERROR event); `fallback_code` is used
    /// when the Status carries no code.
    pub(crate) fn from_status(status: &Status, fallback_code: u16, request: &str) -> ApiError {
        let code = status
            .code
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c != 0)
            .unwrap_or(fallback_code);
        let reason = match status.reason.as_deref() {
            Some(r) if !r.is_empty() => r.to_string(),
            _ => reason_for_code(code).to_string(),
        };
        ApiError::Status {
            code,
            reason,
            message: status.message.clone().unwrap_or_default(),
            request: request.to_string(),
        }
    }

    pub(crate) fn transport(request: &str, msg: impl fmt::Display) -> ApiError {
        ApiError::Transport(format!("{request}: {msg}"))
    }

    pub(crate) fn decode(request: &str, msg: impl fmt::Display) -> ApiError {
        ApiError::Decode(format!("{request}: {msg}"))
    }

    /// The HTTP code of a Status error.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            ApiError::Status { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// apimachinery's rule: the reason decides; the code only when the reason
    /// is not one it knows (so a 409 AlreadyExists is not a Conflict).
    fn is(&self, code: u16, reason: &str) -> bool {
        match self.reason() {
            Some(r) if r == reason => true,
            Some(r) => !KNOWN_REASONS.contains(&r) && self.code() == Some(code),
            None => false,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.is(404, "NotFound")
    }

    pub fn is_conflict(&self) -> bool {
        self.is(409, "Conflict")
    }

    /// Reason AlreadyExists (a 409 that is not a Conflict).
    pub fn is_already_exists(&self) -> bool {
        self.reason() == Some("AlreadyExists")
    }

    /// The resource version asked for is too old: 410, reason Gone or Expired.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410) || matches!(self.reason(), Some("Gone" | "Expired"))
    }

    #[cfg(test)]
    pub fn is_unauthorized(&self) -> bool {
        self.is(401, "Unauthorized")
    }

    pub fn is_forbidden(&self) -> bool {
        self.is(403, "Forbidden")
    }

    pub fn is_too_many_requests(&self) -> bool {
        self.is(429, "TooManyRequests")
    }

    /// Worth trying again later: transport failures, 429 and 500/502/503/504.
    #[cfg(test)]
    pub fn is_retryable(&self) -> bool {
        match self {
            ApiError::Transport(_) => true,
            ApiError::Decode(_) => false,
            ApiError::Status { code, .. } => is_retryable_code(*code),
        }
    }
}

/// The StatusReasons apimachinery defines.
const KNOWN_REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

pub(crate) fn is_retryable_code(code: u16) -> bool {
    matches!(code, 429 | 500 | 502 | 503 | 504)
}

/// The StatusReason apimachinery assigns to a bare HTTP code.
fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        504 => "Timeout",
        c if c >= 500 => "InternalError",
        _ => "Unknown",
    }
}

/// A non-Status body as a message: trimmed, bounded, never empty.
fn body_text(code: u16, body: &[u8]) -> String {
    const MAX: usize = 1024;
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX)]);
    let text = text.trim();
    if text.is_empty() {
        format!(
            "the server responded with the status code {code} but did not return more information"
        )
    } else {
        text.to_string()
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Status {
                code,
                reason,
                message,
                request,
            } => {
                if !request.is_empty() {
                    write!(f, "{request}: ")?;
                }
                write!(f, "{code} {reason}: {message}")
            }
            ApiError::Transport(msg) => write!(f, "{msg}"),
            ApiError::Decode(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for ApiError {}
