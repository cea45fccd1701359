//! The request pipeline after parsing: each protocol's ingress, the models signals read, the
//! plugins, the selection inputs and the pool's load, session continuity, the semantic cache's lookup, and what
//! happens once the decision is made.

pub mod admission;
pub mod cache;
pub(in crate::engine) mod decided;
pub(in crate::engine) mod ingress;
pub(in crate::engine) mod load;
pub(in crate::engine) mod models;
pub(in crate::engine) mod plugins;
pub(in crate::engine) mod route;
pub(in crate::engine) mod select;
pub(in crate::engine) mod session;
pub(in crate::engine) mod tools;
