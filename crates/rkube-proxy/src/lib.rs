//! rkube proxy (to be written).
pub mod cli;
