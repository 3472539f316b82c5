//! The API semantics suite, written once and run against every storage
//! backend (`api_embedded.rs`, `api_etcd.rs`). Each function takes a fresh
//! server and asserts what a client sees.

pub mod create_on_update;
pub mod crud;
pub mod kubernetes_service;
pub mod watch;

/// Expands to one `#[tokio::test]` per suite function, each on a fresh server from `$server`.
#[macro_export]
macro_rules! suite_tests {
    ($server:expr; $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let s = $server.await;
                $crate::suite::$module::$name(&s).await;
            }
        )*
    };
}

/// Every suite test, for `suite_tests!`: `$server` builds a default server,
/// `$storage_reads` one that serves reads straight from storage (for the
/// rules about compacted storage revisions, which a watch cache may still serve).
#[macro_export]
macro_rules! all_suite_tests {
    ($server:expr, $storage_reads:expr) => {
        $crate::suite_tests!($storage_reads;
            crud::list_at_compacted_revision_is_410_expired,
            watch::watch_from_compacted_revision_gets_410_error_event,
        );
        $crate::suite_tests!($server;
            crud::create_sets_server_fields_and_defaults,
            crud::create_duplicate_is_409_already_exists,
            crud::create_in_missing_namespace_is_404,
            crud::create_with_mismatched_namespace_is_400,
            crud::create_with_invalid_name_is_422_with_causes,
            crud::create_pod_without_image_is_422,
            crud::create_with_generate_name_adds_suffix,
            crud::create_with_wrong_kind_or_version_is_400,
            crud::create_with_wrong_field_type_is_400,
            crud::strict_field_validation_rejects_unknown_fields,
            crud::dry_run_create_stores_nothing,
            crud::created_objects_answer_with_their_managed_fields,
            crud::yaml_bodies_and_yaml_responses,
            crud::body_over_3mib_is_413,
            crud::malformed_json_is_400,
            crud::unsupported_content_type_is_415,
            crud::protobuf_tables_only_accept_is_406,
            crud::get_missing_is_404_not_found,
            crud::list_has_kind_api_version_and_resource_version,
            crud::list_filters_by_label_and_field_selectors,
            crud::list_paginates_with_limit_and_continue,
            crud::list_with_selector_pages_without_remaining_count,
            crud::list_all_namespaces,
            crud::update_with_stale_resource_version_is_409,
            crud::update_keeps_immutable_metadata_and_bumps_generation_on_spec_change,
            crud::noop_update_keeps_resource_version,
            crud::status_subresource_separates_spec_and_status,
            crud::patch_types_apply_to_the_stored_object,
            crud::patch_with_stale_resource_version_is_409,
            crud::server_side_apply_creates_then_updates,
            crud::delete_answers_object_or_status_like_upstream,
            crud::delete_preconditions_conflict,
            crud::finalizers_defer_deletion_until_removed,
            crud::deleting_a_namespace_marks_it_terminating_until_finalized,
            crud::system_namespaces_may_not_be_deleted,
            crud::foreground_and_orphan_deletes_add_gc_finalizers,
            crud::creating_in_a_terminating_namespace_is_403,
            crud::delete_collection_honours_label_selector,
            crud::pod_binding_sets_node_once,
            crud::services_get_cluster_ips_and_defaults,
            crud::endpointslice_ports_are_defaulted,
            crud::unknown_paths_are_404_and_wrong_methods_405,
            crud::protobuf_bodies_from_kubectl_1_33_are_accepted,
            crud::deployment_scale_subresource_reads_and_sets_replicas,
            crud::nodeport_services_get_node_ports_from_the_range,
            create_on_update::put_of_missing_lease_creates_it_with_201,
            create_on_update::put_of_missing_configmap_is_404_not_found,
            kubernetes_service::kubernetes_service_points_at_the_apiserver_and_is_idempotent,
            watch::watch_from_resource_version_streams_later_changes,
            watch::watch_at_zero_sends_synthetic_added_first,
            watch::watch_one_object_by_name_like_kubectl_get_w,
            watch::watch_selector_turns_unmatching_into_deleted_and_matching_into_added,
            watch::watch_timeout_seconds_ends_the_stream,
            watch::watch_list_ends_initial_events_with_annotated_bookmark,
            watch::legacy_watch_path_streams_events,
            watch::watch_all_namespaces_sees_every_namespace,
        );
    };
}
