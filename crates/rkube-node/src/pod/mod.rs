//! Running pods: CRI configs from specs, the sync plan, phases, API status, per-pod workers and
//! the dispatcher.

pub mod actions;
pub mod api_status;
pub mod atomic_writer;
pub mod cri_config;
pub mod env;
pub mod ephemeral;
pub mod hooks;
pub mod manager;
pub mod phase;
pub mod prober;
pub mod trust_bundles;
pub mod volumes;
pub mod worker;

#[cfg(test)]
mod tests;
