//! kubectl end-to-end suite: the real kubectl binaries (1.27 and 1.33)
//! against `rkube up` (embedded store) and `rkube apiserver` on a real etcd.
//!
//! Every scenario runs once per backend × kubectl version, each on its own
//! fresh server (test names: `<backend>_kubectl_<version>::<scenario>`).
//! Scenarios live in `kubectl_e2e/`, the harness in `common/`.

#[path = "kubectl_e2e/mod.rs"]
mod scenarios;

use scenarios::apply::{
    apply_multi_document_manifest_then_reapply_merges_changes,
    apply_server_side_creates_then_merges_field_managers,
    apply_secret_string_data_lands_in_data, apply_then_apply_server_side_migrates_and_reapplies,
};
use scenarios::cascade::{
    delete_cascade_background_foreground_orphan, delete_manifest_holding_its_own_namespace_succeeds,
    delete_namespace_shows_terminating_then_it_goes,
};
use scenarios::debug::debug_adds_an_ephemeral_container;
use scenarios::every_kind::apply_every_kind_then_reapply_writes_nothing;
use scenarios::delete::delete_waits_until_gone_and_wait_false_returns_at_once;
use scenarios::describe::describe_pod_and_service;
use scenarios::discovery::{
    api_resources_lists_short_names, health_endpoints_answer_like_kube_apiserver,
};
use scenarios::errors::{
    create_body_over_3mib_is_request_entity_too_large, create_configmap_over_1mib_is_invalid,
    create_duplicate_is_already_exists,
    create_invalid_name_is_invalid_with_field_cause,
    create_unknown_field_is_rejected_by_strict_validation, get_missing_object_is_not_found,
    replace_stale_manifest_is_conflict,
};
use scenarios::get::{
    get_all_namespaces_with_label_and_field_selectors, get_chunk_size_pages_through_every_object,
    get_output_json_yaml_and_wide, get_table_for_nodes_events_and_secrets,
    get_table_shows_upstream_columns,
};
use scenarios::kubernetes_service::default_kubernetes_service_points_at_the_apiserver;
use scenarios::patch::patch_json_merge_and_strategic;
use scenarios::restart::{
    restart_after_sigkill_keeps_objects_and_resource_versions,
    restart_after_sigterm_keeps_objects_and_resource_versions,
};
use scenarios::watch::{
    get_watch_sees_later_changes, get_watch_single_object_starts_with_current_state,
};

e2e_matrix!(
    apply_multi_document_manifest_then_reapply_merges_changes,
    apply_server_side_creates_then_merges_field_managers,
    apply_every_kind_then_reapply_writes_nothing,
    apply_then_apply_server_side_migrates_and_reapplies,
    apply_secret_string_data_lands_in_data,
    get_table_shows_upstream_columns,
    get_table_for_nodes_events_and_secrets,
    get_output_json_yaml_and_wide,
    get_all_namespaces_with_label_and_field_selectors,
    get_chunk_size_pages_through_every_object,
    get_watch_sees_later_changes,
    get_watch_single_object_starts_with_current_state,
    default_kubernetes_service_points_at_the_apiserver,
    describe_pod_and_service,
    patch_json_merge_and_strategic,
    debug_adds_an_ephemeral_container,
    delete_waits_until_gone_and_wait_false_returns_at_once,
    delete_namespace_shows_terminating_then_it_goes,
    delete_manifest_holding_its_own_namespace_succeeds,
    delete_cascade_background_foreground_orphan,
    api_resources_lists_short_names,
    health_endpoints_answer_like_kube_apiserver,
    get_missing_object_is_not_found,
    create_duplicate_is_already_exists,
    replace_stale_manifest_is_conflict,
    create_invalid_name_is_invalid_with_field_cause,
    create_unknown_field_is_rejected_by_strict_validation,
    create_body_over_3mib_is_request_entity_too_large,
    create_configmap_over_1mib_is_invalid,
    restart_after_sigterm_keeps_objects_and_resource_versions,
    restart_after_sigkill_keeps_objects_and_resource_versions,
);
