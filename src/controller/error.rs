//! Errors of one reconcile pass.

/// Errors of one reconcile pass. Spec problems are not errors: they become conditions.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    /// The API server refused or failed a request on a named object.
    #[error("{verb} {kind} {name}: {source}")]
    Api {
        /// What was asked: get, list, create, apply, delete, patch status.
        verb: &'static str,
        /// Kind of the object.
        kind: String,
        /// `namespace/name` (or the list's selector).
        name: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An object could not be (de)serialised.
    #[error("serialisation: {0}")]
    Serde(#[source] serde_json::Error),
    /// The object has no namespace (the resource is namespaced, so this is a bug upstream).
    #[error("object {0} has no namespace")]
    NoNamespace(String),
    /// Gang scheduling could not be resolved against the API server.
    #[error("gang scheduling: {0}")]
    Placement(String),
    /// This instance's leadership ran out (its renew deadline passed): it writes nothing more.
    #[error("not leading: the leader Lease was not renewed within its deadline; no write is sent")]
    NotLeading,
    /// The resource changed since this pass read it (its status write carried the
    /// resourceVersion it read): the pass is run again on the newer object.
    #[error("the resource changed since this pass read it")]
    Stale,
    /// An object the operator would create exists and is not controlled by this resource: it is
    /// neither changed nor deleted.
    #[error("{kind} {name} exists and is not controlled by this DeepInferDeployment ({owner}); it is left as it is: delete or rename it, or rename the DeepInferDeployment")]
    NameConflict {
        /// Kind of the object.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// Who controls it instead (`no controller`, or `Kind name`).
        owner: String,
    },
}

impl Error {
    /// An API error naming the verb, the kind and the object.
    pub fn api(verb: &'static str, kind: &str, name: &str, source: kube::Error) -> Self {
        Error::Api {
            verb,
            kind: kind.to_string(),
            name: name.to_string(),
            source,
        }
    }

    /// Whether the API server refused the request for lack of permission (HTTP 403).
    pub fn is_forbidden(&self) -> bool {
        matches!(
            self,
            Error::Kube(kube::Error::Api(e)) | Error::Api { source: kube::Error::Api(e), .. }
                if e.code == 403
        )
    }

    /// Short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) | Error::Api { .. } => "kube",
            Error::Serde(_) => "serde",
            Error::NoNamespace(_) => "no_namespace",
            Error::Placement(_) => "placement",
            Error::NameConflict { .. } => "name_conflict",
            Error::NotLeading => "not_leading",
            Error::Stale => "stale",
        }
    }
}
