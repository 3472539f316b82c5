"""Smoke test of the official Python client (`kubernetes` on PyPI) against rkube.

Usage: list_watch.py KUBECONFIG. Prints one JSON object with what the client saw;
crates/rkube/tests/python_client.rs asserts on it.
"""
import json
import sys
import threading
import time

from kubernetes import client, config, watch


def main():
    config.load_kube_config(config_file=sys.argv[1])
    v1 = client.CoreV1Api()
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
    for i in range(3):
        v1.create_namespaced_config_map(
            "py",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"cm-{i}", labels={"app": "py"}),
                data={"i": str(i)},
            ),
        )

    # Paged LIST: limit=2 and follow metadata.continue.
    names, pages, cont = [], 0, None
    while True:
        kwargs = {"label_selector": "app=py", "limit": 2}
        if cont:
            kwargs["_continue"] = cont
        page = v1.list_namespaced_config_map("py", **kwargs)
        pages += 1
        names += [c.metadata.name for c in page.items]
        cont = page.metadata._continue
        if not cont:
            break
    listed = v1.list_namespaced_config_map("py")
    rv = listed.metadata.resource_version

    def later():
        time.sleep(0.5)
        v1.create_namespaced_config_map(
            "py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="late"), data={"a": "1"})
        )
        v1.patch_namespaced_config_map("cm-0", "py", {"data": {"x": "y"}})
        v1.delete_namespaced_config_map("cm-1", "py")

    threading.Thread(target=later, daemon=True).start()
    events = []
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_config_map, "py", resource_version=rv, timeout_seconds=15):
        events.append([ev["type"], ev["object"].metadata.name])
        if len(events) >= 3:
            w.stop()

    not_found = None
    try:
        v1.read_namespaced_config_map("nope", "py")
    except client.ApiException as e:
        body = json.loads(e.body)
        not_found = {"status": e.status, "reason": body.get("reason"), "message": body.get("message")}

    # Discovery: every API group and, through the typed clients, one list per group.
    groups = sorted(g.name for g in client.ApisApi().get_api_versions().groups)
    typed_lists = {
        "batch/v1 jobs": len(client.BatchV1Api().list_job_for_all_namespaces().items),
        "apps/v1 daemonsets": len(client.AppsV1Api().list_daemon_set_for_all_namespaces().items),
        "v1 replicationcontrollers": len(v1.list_replication_controller_for_all_namespaces().items),
        "apiregistration.k8s.io/v1 apiservices": len(client.ApiregistrationV1Api().list_api_service().items) > 0,
        "certificates.k8s.io/v1 certificatesigningrequests": len(
            client.CertificatesV1Api().list_certificate_signing_request().items
        ),
    }

    print(json.dumps({"names": names, "pages": pages, "events": events, "not_found": not_found,
                      "groups": groups, "typed_lists": typed_lists}))


if __name__ == "__main__":
    main()
