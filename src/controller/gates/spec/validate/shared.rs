//! What every rule shares: the error naming a field, the device limits, and the syntax of
//! Kubernetes names, label keys and values, and image digests.

use std::fmt;

use crate::api::*;

/// Most devices one node offers, per accelerator type (`spec.accelerator.devicesPerPod` may not
/// exceed it), and most pods one resource may need. Set from the operator's flags; the CRD's CEL
/// rule uses the device defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Devices per NVIDIA node.
    pub nvidia: i32,
    /// Devices per Ascend node.
    pub ascend: i32,
    /// Pods one resource may need at once: every group of every role plus its surge groups. A
    /// spec past it stalls before anything is built, so no spec can exhaust the operator's memory.
    pub max_pods: i64,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        Self {
            nvidia: DEFAULT_MAX_DEVICES_NVIDIA,
            ascend: DEFAULT_MAX_DEVICES_ASCEND,
            max_pods: DEFAULT_MAX_PODS_PER_DEPLOYMENT,
        }
    }
}

impl DeviceLimits {
    /// Devices one node of `kind` offers.
    pub fn per_node(&self, kind: AcceleratorType) -> i32 {
        match kind {
            AcceleratorType::Nvidia => self.nvidia,
            AcceleratorType::Ascend => self.ascend,
        }
    }
}

/// One violated rule: the field (with indices, e.g. `spec.roles[1].parallel.expert`) and a message
/// that names that field and says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong and what to do; starts with the field.
    pub message: String,
}

impl FieldError {
    /// `message` is appended to the field path.
    pub(super) fn new(field: impl Into<String>, message: impl fmt::Display) -> Self {
        let field = field.into();
        let message = format!("{field} {message}");
        Self { field, message }
    }
}

impl FieldError {
    /// The same error about the field whose value the checked one was read from (`source`).
    pub fn read_from(&mut self, source: &str) {
        self.message = self.message.replacen(&self.field, source, 1);
        self.field = source.to_string();
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FieldError {}

/// All messages joined, for a condition message or an event.
pub fn summarize(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// `^[a-z]([-a-z0-9]*[a-z0-9])?$`: what a Service name and a pod subdomain must be.
pub fn is_dns1035_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.iter().all(inner)
}

/// A Kubernetes label value: at most 63 characters of `[A-Za-z0-9-_.]`, starting and ending with
/// a letter or digit (or empty).
pub fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    v.len() <= 63
        && (b.is_empty()
            || (b.first().is_some_and(edge)
                && b.last().is_some_and(edge)
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))))
}

/// A Kubernetes label key: an optional DNS-subdomain prefix (at most 253) and `/`, then a name
/// that is a non-empty label value.
pub fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns1123_subdomain) && !name.is_empty() && is_label_value(name)
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated parts of lowercase letters,
/// digits and '-', each starting and ending with a letter or digit.
pub fn is_dns1123_subdomain(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 253
        && p.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Same as the CEL `matches('^[^@ ]+@sha256:[0-9a-f]{64}$')`.
pub(super) fn is_pinned_by_digest(image: &str) -> bool {
    let Some((repository, digest)) = image.split_once('@') else {
        return false;
    };
    !repository.is_empty()
        && !repository.contains(' ')
        && digest
            .strip_prefix("sha256:")
            .is_some_and(|hex| is_lower_hex(hex, 64, 64))
}

/// Same as the CEL `matches('^[0-9a-f]{min,max}$')`.
pub(super) fn is_lower_hex(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub(super) fn kind_name(kind: AcceleratorType) -> &'static str {
    match kind {
        AcceleratorType::Nvidia => "NVIDIA",
        AcceleratorType::Ascend => "Ascend",
    }
}
