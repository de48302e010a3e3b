//! Text helpers for messages the controller writes into status, events and evidence.

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Key of a resource in the phase gauge and the metrics: `namespace/name`.
pub fn phase_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use crate::controller::text::truncate;

    #[test]
    fn truncate_cuts_on_a_character_boundary_and_marks_the_cut() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdef", 3), "abc\u{2026}");
        // 'é' is two bytes: a cut inside it moves back to the boundary before it.
        assert_eq!(truncate("aé", 2), "a\u{2026}");
    }
}
