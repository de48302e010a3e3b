//! A role's parallel layout as the operator's Jobs take it on their command line: one text
//! format, `<role>=<tensor>x<pipeline>x<data>x<expert>`, for every Job that takes one.

use std::str::FromStr;

use super::{ParallelSpec, RoleSpec};

/// A role's parallel layout, as `--layout <role>=<tensor>x<pipeline>x<data>x<expert>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleLayout {
    /// Role name (`worker`, `prefill`, `decode`, `vision`).
    pub role: String,
    /// Tensor parallel size.
    pub tensor: u64,
    /// Pipeline parallel size.
    pub pipeline: u64,
    /// Data parallel size.
    pub data: u64,
    /// Expert parallel size.
    pub expert: u64,
}

impl FromStr for RoleLayout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage = || {
            format!("`{s}` is not <role>=<tensor>x<pipeline>x<data>x<expert>, e.g. worker=8x1x2x16")
        };
        let (role, sizes) = s.split_once('=').ok_or_else(usage)?;
        let sizes: Vec<u64> = sizes
            .split('x')
            .map(|n| n.trim().parse::<u64>().ok().filter(|n| *n > 0))
            .collect::<Option<_>>()
            .ok_or_else(usage)?;
        let [tensor, pipeline, data, expert] = sizes.as_slice() else {
            return Err(usage());
        };
        if role.trim().is_empty() {
            return Err(usage());
        }
        Ok(Self {
            role: role.trim().to_string(),
            tensor: *tensor,
            pipeline: *pipeline,
            data: *data,
            expert: *expert,
        })
    }
}

impl std::fmt::Display for RoleLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={}x{}x{}x{}",
            self.role, self.tensor, self.pipeline, self.data, self.expert
        )
    }
}

impl Default for RoleLayout {
    /// `worker=1x1x1x1`.
    fn default() -> Self {
        Self {
            role: "worker".into(),
            tensor: 1,
            pipeline: 1,
            data: 1,
            expert: 1,
        }
    }
}

impl RoleLayout {
    /// The layout of `role` as the spec gives it.
    pub fn of(role: &RoleSpec) -> Self {
        let size = |n: i32| u64::try_from(n).unwrap_or(1).max(1);
        let p = &role.parallel;
        Self {
            role: role.name.clone(),
            tensor: size(p.tensor),
            pipeline: size(p.pipeline),
            data: size(p.data),
            expert: size(p.expert),
        }
    }
}

impl From<&RoleLayout> for ParallelSpec {
    fn from(l: &RoleLayout) -> Self {
        let size = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
        ParallelSpec {
            tensor: size(l.tensor),
            pipeline: size(l.pipeline),
            data: size(l.data),
            expert: size(l.expert),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_reads_back_from_its_text() {
        for text in ["decode=8x1x2x16", "worker=1x1x1x1"] {
            let l: RoleLayout = text.parse().expect("parses");
            assert_eq!(l.to_string(), text);
        }
        for bad in [
            "decode",
            "decode=8x1x2",
            "=8x1x1x1",
            "decode=0x1x1x1",
            "tensor=8,expert=4",
        ] {
            assert!(bad.parse::<RoleLayout>().is_err(), "{bad}");
        }
    }
}
