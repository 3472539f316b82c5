//! The kubectl scenarios, one module per command family.

pub mod apply;
pub mod cascade;
pub mod debug;
pub mod delete;
pub mod describe;
pub mod discovery;
pub mod errors;
pub mod every_kind;
pub mod get;
pub mod kubernetes_service;
pub mod manifests;
pub mod patch;
pub mod restart;
pub mod watch;
