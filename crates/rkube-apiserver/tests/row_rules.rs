//! Rules that live in the resource table's rows and strategies, proven over
//! real HTTP against an in-process server (embedded store):
//! `pods/ephemeralcontainers` (upstream `EphemeralContainersREST` and
//! `ValidatePodEphemeralContainersUpdate`), core/v1 Event validation
//! (upstream `pkg/apis/core/validation/events.go`) and what a DELETE
//! answers (upstream `ReturnDeletedObject` and `handlers/delete.go`), and a
//! DaemonSet's template generation (upstream `daemonSetStrategy`).

#[path = "row_rules/daemonsets.rs"]
mod daemonsets;
#[path = "row_rules/delete.rs"]
mod delete;
#[path = "row_rules/ephemeral.rs"]
mod ephemeral;
#[path = "row_rules/events.rs"]
mod events;
