//! Paths inside a checkpoint directory, as the fetch writes them and the verifier reads them.

use std::path::{Component, Path};

/// A relative path that stays inside its base directory.
pub fn is_safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\\')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_paths() {
        assert!(is_safe_relative("model-00001-of-00002.safetensors"));
        assert!(is_safe_relative("original/params.json"));
        for bad in ["", "../x", "/etc/passwd", "a/../../b", "a\\b", "./a"] {
            assert!(!is_safe_relative(bad), "{bad}");
        }
    }
}
