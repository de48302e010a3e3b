//! The licence gate: whether the model's licence is accepted for this deployment, and each
//! serving pod's entitlement that follows from it.

pub mod entitlement;

use std::collections::BTreeMap;

use crate::api::{Reason, LICENSE_ACCEPTED_ANNOTATION};

/// What a closed licence gate does to a deployment's pods (`--license-withdrawal`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LicenceWithdrawal {
    /// Out of service, kept (devices held).
    #[default]
    Withhold,
    /// Deleted with running acceptance Jobs (devices freed).
    Stop,
}

/// Outcome of the licence gate. Nothing is provisioned unless it is [`LicenceVerdict::Accepted`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LicenceVerdict {
    /// Annotation equals `spec.model.license` and the licence is allowed.
    Accepted,
    /// The `deepinfer.io/license-accepted` annotation is absent or empty.
    AnnotationMissing,
    /// The annotation names a different licence than `spec.model.license`.
    Mismatch {
        /// Value of the annotation.
        annotation: String,
        /// `spec.model.license`.
        spec: String,
    },
    /// The licence is not on the operator's allow-list.
    NotAllowed {
        /// `spec.model.license`.
        license: String,
        /// The operator's allow-list.
        allowed: Vec<String>,
    },
}

/// Checks, in order: the annotation is present, it equals `spec.model.license`, and that licence
/// is on the operator's allow-list (`--accepted-licenses`). Ids compare exactly.
pub fn licence_gate(
    annotations: &BTreeMap<String, String>,
    spec_license: &str,
    allow_list: &[String],
) -> LicenceVerdict {
    let annotation = match annotations.get(LICENSE_ACCEPTED_ANNOTATION) {
        Some(value) if !value.trim().is_empty() => value,
        _ => return LicenceVerdict::AnnotationMissing,
    };
    if annotation != spec_license {
        return LicenceVerdict::Mismatch {
            annotation: annotation.clone(),
            spec: spec_license.to_owned(),
        };
    }
    if !allow_list.iter().any(|allowed| allowed == spec_license) {
        return LicenceVerdict::NotAllowed {
            license: spec_license.to_owned(),
            allowed: allow_list.to_vec(),
        };
    }
    LicenceVerdict::Accepted
}

impl LicenceVerdict {
    /// Whether provisioning may go ahead.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Self::Accepted)
    }

    /// Reason for the `LicenseAccepted` condition.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Accepted => Reason::LicenseAccepted,
            Self::AnnotationMissing => Reason::LicenseAnnotationMissing,
            Self::Mismatch { .. } => Reason::LicenseMismatch,
            Self::NotAllowed { .. } => Reason::LicenseNotAllowed,
        }
    }

    /// What is wrong and the command or setting that fixes it, for the resource
    /// `namespace/name` whose `spec.model.license` is `license`.
    pub fn message(&self, namespace: &str, name: &str, license: &str) -> String {
        let annotate = |overwrite: &str| {
            format!(
                "kubectl -n {namespace} annotate{overwrite} did/{name} {LICENSE_ACCEPTED_ANNOTATION}={license}"
            )
        };
        match self {
            Self::Accepted => format!(
                "licence {license:?} (spec.model.license) is accepted by annotation {LICENSE_ACCEPTED_ANNOTATION} and allowed by the operator"
            ),
            Self::AnnotationMissing => format!(
                "annotation {LICENSE_ACCEPTED_ANNOTATION} is missing: nothing is provisioned until the checkpoint's licence {license:?} (spec.model.license) is accepted; read it, then run `{}`",
                annotate("")
            ),
            Self::Mismatch { annotation, spec } => format!(
                "annotation {LICENSE_ACCEPTED_ANNOTATION} is {annotation:?} but spec.model.license is {spec:?}: they must be equal; accept the checkpoint's licence with `{}` or correct spec.model.license",
                annotate(" --overwrite")
            ),
            Self::NotAllowed { license, allowed } => {
                let list = if allowed.is_empty() {
                    "is empty".to_owned()
                } else {
                    format!("holds only {}", allowed.join(", "))
                };
                format!(
                    "licence {license:?} (spec.model.license) is not on the operator's allow-list, which {list}; ask the operator's admin to add {license:?} to --accepted-licenses (Helm value acceptedLicenses)"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn annotated(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(LICENSE_ACCEPTED_ANNOTATION.to_owned(), value.to_owned())])
    }

    fn allow(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn license_accepted_when_annotation_matches_and_allowed() {
        let verdict = licence_gate(&annotated("mit"), "mit", &allow(&["apache-2.0", "mit"]));
        assert_eq!(verdict, LicenceVerdict::Accepted);
        assert!(verdict.is_accepted());
        assert_eq!(verdict.reason(), Reason::LicenseAccepted);
    }

    #[test]
    fn license_annotation_missing_or_empty() {
        for annotations in [BTreeMap::new(), annotated(""), annotated("  ")] {
            let verdict = licence_gate(&annotations, "mit", &allow(&["mit"]));
            assert_eq!(verdict, LicenceVerdict::AnnotationMissing);
            assert_eq!(verdict.reason(), Reason::LicenseAnnotationMissing);
            let message = verdict.message("serving", "flash", "mit");
            assert!(message.contains(LICENSE_ACCEPTED_ANNOTATION), "{message}");
            assert!(message.contains("spec.model.license"), "{message}");
            assert!(
                message.contains(
                    "kubectl -n serving annotate did/flash deepinfer.io/license-accepted=mit"
                ),
                "{message}"
            );
        }
    }

    #[test]
    fn license_mismatch_names_both_values() {
        let verdict = licence_gate(&annotated("apache-2.0"), "mit", &allow(&["mit"]));
        assert_eq!(
            verdict,
            LicenceVerdict::Mismatch {
                annotation: "apache-2.0".into(),
                spec: "mit".into()
            }
        );
        assert!(!verdict.is_accepted());
        assert_eq!(verdict.reason(), Reason::LicenseMismatch);
        let message = verdict.message("serving", "flash", "mit");
        for needle in [
            LICENSE_ACCEPTED_ANNOTATION,
            "\"apache-2.0\"",
            "spec.model.license is \"mit\"",
            "kubectl -n serving annotate --overwrite did/flash deepinfer.io/license-accepted=mit",
        ] {
            assert!(
                message.contains(needle),
                "{needle:?} missing from {message}"
            );
        }
    }

    #[test]
    fn license_mismatch_is_exact_comparison() {
        let verdict = licence_gate(&annotated("MIT"), "mit", &allow(&["mit"]));
        assert!(matches!(verdict, LicenceVerdict::Mismatch { .. }));
    }

    #[test]
    fn license_not_allowed_names_flag_and_helm_value() {
        let verdict = licence_gate(&annotated("mit"), "mit", &allow(&["apache-2.0"]));
        assert_eq!(
            verdict,
            LicenceVerdict::NotAllowed {
                license: "mit".into(),
                allowed: allow(&["apache-2.0"])
            }
        );
        assert_eq!(verdict.reason(), Reason::LicenseNotAllowed);
        let message = verdict.message("serving", "flash", "mit");
        for needle in [
            "spec.model.license",
            "apache-2.0",
            "--accepted-licenses",
            "acceptedLicenses",
        ] {
            assert!(
                message.contains(needle),
                "{needle:?} missing from {message}"
            );
        }
        let empty = licence_gate(&annotated("mit"), "mit", &[]);
        assert!(empty
            .message("serving", "flash", "mit")
            .contains("allow-list, which is empty"));
    }

    #[test]
    fn license_checks_run_in_order_missing_mismatch_not_allowed() {
        // Missing wins over not allowed; mismatch wins over not allowed.
        assert_eq!(
            licence_gate(&BTreeMap::new(), "mit", &[]),
            LicenceVerdict::AnnotationMissing
        );
        assert!(matches!(
            licence_gate(&annotated("other"), "mit", &[]),
            LicenceVerdict::Mismatch { .. }
        ));
    }
}
