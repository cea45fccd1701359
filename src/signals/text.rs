//! Which message texts a text signal reads.

use crate::llm::ChatRequest;

/// The messages a text signal scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The last user message.
    LastUser,
    /// Every user message.
    AllUser,
    /// Every message.
    All,
}

impl Scope {
    /// The texts in scope, in message order.
    pub fn texts(self, request: &ChatRequest) -> Vec<&str> {
        match self {
            Self::LastUser => vec![request.last_user_text()],
            Self::AllUser => request
                .messages
                .iter()
                .filter(|m| m.role == "user")
                .map(|m| m.text.as_str())
                .collect(),
            Self::All => request.messages.iter().map(|m| m.text.as_str()).collect(),
        }
    }
}
