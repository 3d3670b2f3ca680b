//! API errors as v1 Status objects with the real server's code/reason/message shapes.

use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Sent as a Retry-After header too.
    pub retry_after: Option<u64>,
}

/// `resource` is the qualified resource: `pods`, `leases.coordination.k8s.io`.
fn details(resource: &str, name: &str) -> Value {
    let (kind, group) = match resource.split_once('.') {
        Some((k, g)) => (k, g),
        None => (resource, ""),
    };
    let mut d = json!({"kind": kind});
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }
    pub fn not_found(resource: &str, name: &str) -> Self {
        ApiError {
            details: Some(details(resource, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{}\" not found", resource, name),
            )
        }
    }
    pub fn path_not_found() -> Self {
        ApiError {
            details: Some(json!({})),
            ..Self::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    }
    pub fn already_exists(resource: &str, name: &str) -> Self {
        ApiError {
            details: Some(details(resource, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{}\" already exists", resource, name),
            )
        }
    }
    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        ApiError {
            details: Some(details(resource, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": {}",
                    resource, name, why
                ),
            )
        }
    }
    pub fn optimistic_lock(resource: &str, name: &str) -> Self {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }
    /// `kind` is the Kind (`Pod`), `errs` are (field, reasonType, message) triples.
    pub fn invalid(
        kind: &str,
        group: &str,
        name: &str,
        errs: &[(String, &'static str, String)],
    ) -> Self {
        // field.ErrorList.ToAggregate drops repeated messages from the
        // text; the causes keep every error.
        let mut msgs: Vec<String> = vec![];
        for (f, _, m) in errs {
            let msg = if f.is_empty() {
                m.clone()
            } else {
                format!("{}: {}", f, m)
            };
            if !msgs.contains(&msg) {
                msgs.push(msg);
            }
        }
        let joined = if msgs.len() == 1 {
            msgs[0].clone()
        } else {
            format!("[{}]", msgs.join(", "))
        };
        let causes: Vec<Value> = errs
            .iter()
            .map(|(f, r, m)| json!({"reason": r, "message": m, "field": f}))
            .collect();
        let mut d = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{}.{}", kind, group)
        };
        ApiError {
            details: Some(d),
            ..Self::new(
                422,
                "Invalid",
                format!("{} \"{}\" is invalid: {}", qualified, name, joined),
            )
        }
    }
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }
    pub fn forbidden(resource: &str, name: &str, why: &str) -> Self {
        let what = if name.is_empty() {
            resource.to_string()
        } else {
            format!("{} \"{}\"", resource, name)
        };
        ApiError {
            details: Some(details(resource, name)),
            ..Self::new(403, "Forbidden", format!("{} is forbidden: {}", what, why))
        }
    }
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }
    pub fn method_not_allowed() -> Self {
        ApiError {
            details: Some(json!({})),
            ..Self::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        }
    }
    pub fn expired(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }
    pub fn too_many_requests(retry_after: u64) -> Self {
        ApiError {
            details: Some(json!({"retryAfterSeconds": retry_after})),
            retry_after: Some(retry_after),
            ..Self::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            )
        }
    }
    pub fn internal(msg: &str) -> Self {
        ApiError {
            details: Some(json!({"causes": [{"message": msg}]})),
            ..Self::new(
                500,
                "InternalError",
                format!("Internal error occurred: {}", msg),
            )
        }
    }
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {:?})", ct),
        )
    }
    pub fn too_large() -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    }
    /// The status for an injected fault of an arbitrary code.
    pub fn for_code(code: u16, retry_after: Option<u64>) -> Self {
        let mut e = match code {
            429 => Self::too_many_requests(retry_after.unwrap_or(1)),
            500 => Self::internal("injected fault"),
            503 => Self::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => Self::new(
                504,
                "Timeout",
                "the server was unable to return a response in the time allotted",
            ),
            401 => Self::unauthorized(),
            403 => Self::new(403, "Forbidden", "forbidden (injected fault)"),
            404 => Self::path_not_found(),
            409 => Self::new(409, "Conflict", "conflict (injected fault)"),
            410 => Self::expired("too old resource version (injected fault)"),
            c => Self::new(c, "", format!("injected fault {}", c)),
        };
        if retry_after.is_some() {
            e.retry_after = retry_after;
            if let Some(d) = e.details.as_mut() {
                d["retryAfterSeconds"] = json!(retry_after);
            } else {
                e.details = Some(json!({"retryAfterSeconds": retry_after}));
            }
        }
        e
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            s["reason"] = json!(self.reason);
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// The Status a successful delete of a kind without ReturnDeletedObject answers.
pub fn success_status(resource: &str, name: &str, uid: &str) -> Value {
    let mut d = details(resource, name);
    d["uid"] = json!(uid);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}
