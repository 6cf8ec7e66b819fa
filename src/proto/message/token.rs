//! The join token after a rotation, as it travels (see `crate::net::token_ring`).

use serde::{Deserialize, Serialize};

/// A rotated join token and its generation. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUpdate {
    /// The rotation's generation (higher wins).
    pub generation: u64,
    /// The token's 32 bytes.
    pub token: [u8; 32],
}

impl std::fmt::Debug for TokenUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenUpdate")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}
