"""The official Python client's stream(connect_get_namespaced_pod_exec) against rkube up --node.

Usage: pod_exec.py KUBECONFIG POD. Prints one JSON object with what the client saw;
crates/rkube/tests/python_client.rs asserts on it.
"""
import json
import sys

from kubernetes import client, config
from kubernetes.stream import stream


def main():
    config.load_kube_config(config_file=sys.argv[1])
    core = client.CoreV1Api()
    pod = sys.argv[2]
    out = {}
    # Whole output at once (_preload_content=True).
    out["output"] = stream(core.connect_get_namespaced_pod_exec, pod, "default",
                           command=["sh", "-c", "echo hello; echo world"],
                           stdout=True, stderr=True, stdin=False, tty=False)
    # A client that keeps the connection: separate streams, stdin and the exit code.
    ws = stream(core.connect_get_namespaced_pod_exec, pod, "default",
                command=["sh", "-c", "read line; echo got $line; echo bad >&2; exit 4"],
                stdout=True, stderr=True, stdin=True, tty=False, _preload_content=False)
    ws.write_stdin("ping\n")
    stdout, stderr = "", ""
    while ws.is_open():
        ws.update(timeout=1)
        stdout += ws.read_stdout(timeout=0) or ""
        stderr += ws.read_stderr(timeout=0) or ""
    out["stdout"] = stdout
    out["stderr"] = stderr
    out["returncode"] = ws.returncode
    print(json.dumps(out))


main()
