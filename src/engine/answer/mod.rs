//! What an answer owes before the client gets it — its output contract, the answer guard, the
//! grounding check, the masked values to restore, the cache ticket — and the settling of those
//! obligations in their declared order, for an answer from upstream or in hand.

pub(in crate::engine) mod answer_guard;
pub mod contract;
pub mod grounding;
pub mod held;
pub mod keep;
pub mod obligations;
pub mod pii_mask;
