"""The official Python client's read_namespaced_pod_log against rkube up --node.

Usage: pod_log.py KUBECONFIG POD. Prints one JSON object with what the client saw;
crates/rkube/tests/python_client.rs asserts on it.
"""
import json
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException


def main():
    config.load_kube_config(config_file=sys.argv[1])
    core = client.CoreV1Api()
    pod = sys.argv[2]
    out = {
        "all": core.read_namespaced_pod_log(pod, "default"),
        "tail": core.read_namespaced_pod_log(pod, "default", tail_lines=1),
        "limit": core.read_namespaced_pod_log(pod, "default", limit_bytes=3),
    }
    try:
        core.read_namespaced_pod_log(pod, "default", container="nope")
    except ApiException as e:
        body = json.loads(e.body)
        out["bad_container"] = {"status": e.status, "reason": body.get("reason"), "message": body.get("message")}
    print(json.dumps(out))


main()
