//! The roles a serving group may take.

/// The role a serving group takes (`spec.roles[].name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleKind {
    /// Prefill and decode in one group.
    Worker,
    /// Prefill only, handing its KV cache to decode groups.
    Prefill,
    /// Decode, fed by prefill (and vision) groups.
    Decode,
    /// The vision encoder.
    Vision,
}

impl RoleKind {
    /// The role's name in the spec.
    pub const fn as_str(self) -> &'static str {
        match self {
            RoleKind::Worker => "worker",
            RoleKind::Prefill => "prefill",
            RoleKind::Decode => "decode",
            RoleKind::Vision => "vision",
        }
    }

    /// Whether `name` names this role.
    pub fn named(self, name: &str) -> bool {
        name == self.as_str()
    }
}
