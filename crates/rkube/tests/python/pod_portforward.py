"""The official Python client's portforward(connect_get_namespaced_pod_portforward) against
rkube up --node: an HTTP GET through the forwarded port.

Usage: pod_portforward.py KUBECONFIG POD PORT. Prints one JSON object with what the client saw;
crates/rkube/tests/python_client.rs asserts on it.
"""
import json
import sys

from kubernetes import client, config
from kubernetes.stream import portforward


def main():
    config.load_kube_config(config_file=sys.argv[1])
    core = client.CoreV1Api()
    pod, port = sys.argv[2], int(sys.argv[3])
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, "default", ports=str(port))
    sock = pf.socket(port)
    sock.setblocking(True)
    sock.sendall(b"GET /hello.txt HTTP/1.0\r\nHost: pod\r\n\r\n")
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    print(json.dumps({
        "status_line": head.split(b"\r\n")[0].decode(),
        "body": body.decode(),
        "error": pf.error(port),
    }))


main()
