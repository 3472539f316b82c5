//! `kubectl describe pod` and `describe service` (which also list Events
//! by involvedObject field selectors and a Service's endpoints).

use super::apply::apply_app;
use super::manifests::event;
use crate::common::table::describe_value;
use crate::common::{str_at, Cluster, Kubectl};

/// `describe pod` shows the pod's identity, status, containers and only its
/// own Events; `describe service` shows type, IP, ports and endpoints.
pub fn describe_pod_and_service(c: &mut Cluster, k: &Kubectl) {
    apply_app(c, k);
    let pod_uid = str_at(
        &k.json(&["get", "pod", "web-0", "-n", "shop"]),
        "/metadata/uid",
    )
    .to_owned();
    let svc_uid = str_at(
        &k.json(&["get", "service", "web", "-n", "shop"]),
        "/metadata/uid",
    )
    .to_owned();
    let events = [
        event(
            "web-0.1",
            "Pod",
            "v1",
            "web-0",
            &pod_uid,
            "Scheduled",
            "Successfully assigned shop/web-0 to node-a",
        ),
        event(
            "web.1",
            "Service",
            "v1",
            "web",
            &svc_uid,
            "Synced",
            "service-event-only",
        ),
    ]
    .join("---\n");
    let f = c.write_file("events.yaml", &events);
    k.ok(&["create", "-f", f.to_str().unwrap()]);
    // The pod gets an IP and turns Ready (what a kubelet would report); the
    // endpoints controller then writes the Service's Endpoints, which
    // kubectl before 1.32 describes (later ones read EndpointSlices).
    let status = r#"{"status":{"podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"}],"conditions":[{"type":"Ready","status":"True"}]}}"#;
    k.ok(&["patch", "pod", "web-0", "-n", "shop", "--subresource=status", "-p", status]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while k.run(&["get", "endpoints", "web", "-n", "shop", "-o", "jsonpath={.subsets[0].addresses[0].ip}"]).stdout != "10.244.0.5" {
        assert!(std::time::Instant::now() < deadline, "the endpoints controller did not list web-0 in 20 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    let out = k.ok(&["describe", "pod", "web-0", "-n", "shop"]).stdout;
    assert_eq!(describe_value(&out, 0, "Name"), "web-0");
    assert_eq!(describe_value(&out, 0, "Namespace"), "shop");
    assert_eq!(describe_value(&out, 0, "Node"), "<none>");
    assert_eq!(describe_value(&out, 0, "Labels"), "app=web");
    assert_eq!(describe_value(&out, 0, "Status"), "Pending");
    assert_eq!(describe_value(&out, 0, "Containers"), "");
    assert!(
        out.lines().any(|l| l == "  web:"),
        "container heading `  web:` in:\n{out}"
    );
    assert_eq!(describe_value(&out, 4, "Image"), "nginx:1.25");
    assert_eq!(describe_value(&out, 4, "Port"), "8080/TCP");
    assert_eq!(describe_value(&out, 6, "MODE"), "blue");
    // The in-process scheduler also lists FailedScheduling (there is no node)
    // and a `PodScheduled  False` condition: pick the Normal/Scheduled event row.
    let event_line = out
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["Normal", "Scheduled"]))
        .unwrap_or_else(|| panic!("the pod's event is listed under Events:\n{out}"));
    let cells: Vec<&str> = event_line.split_whitespace().collect();
    assert_eq!(cells[0..2], ["Normal", "Scheduled"], "{event_line}");
    assert!(
        event_line.ends_with("default-scheduler  Successfully assigned shop/web-0 to node-a"),
        "{event_line:?}"
    );
    assert!(
        !out.contains("service-event-only"),
        "another object's event leaked into describe pod:\n{out}"
    );

    let out = k.ok(&["describe", "service", "web", "-n", "shop"]).stdout;
    assert_eq!(describe_value(&out, 0, "Name"), "web");
    assert_eq!(describe_value(&out, 0, "Namespace"), "shop");
    assert_eq!(describe_value(&out, 0, "Labels"), "app=web");
    assert_eq!(describe_value(&out, 0, "Selector"), "app=web");
    assert_eq!(describe_value(&out, 0, "Type"), "ClusterIP");
    assert_eq!(describe_value(&out, 0, "IP"), "10.96.100.10");
    assert_eq!(describe_value(&out, 0, "Port"), "http  80/TCP");
    assert_eq!(describe_value(&out, 0, "TargetPort"), "8080/TCP");
    // From the Endpoints (1.27), or from the EndpointSlices (1.33): the
    // controller's and the manifest's hand-written one, both 10.244.0.5.
    let endpoints = describe_value(&out, 0, "Endpoints");
    assert!(!endpoints.is_empty() && endpoints.split(',').all(|e| e == "10.244.0.5:8080"), "{endpoints}");
    assert!(
        out.contains("service-event-only"),
        "the service's event is listed:\n{out}"
    );
    assert!(
        !out.contains("Successfully assigned"),
        "the pod's event leaked into describe service:\n{out}"
    );
}
