//! Manifests the kubectl scenarios apply. Everything here is valid against a
//! real Kubernetes cluster too (e.g. the Service's fixed `clusterIP` lies in
//! the default service range), so expected outputs are what kubectl prints
//! against kube-apiserver.

/// Namespace, ConfigMap, Pod, Service, EndpointSlice, Deployment in `shop`.
pub const APP_V1: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: shop
data:
  mode: blue
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: shop
  labels:
    app: web
spec:
  containers:
  - name: web
    image: nginx:1.25
    ports:
    - name: http
      containerPort: 8080
    env:
    - name: MODE
      value: blue
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels:
    app: web
spec:
  clusterIP: 10.96.100.10
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
    protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc12
  namespace: shop
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses:
  - 10.244.0.5
  conditions:
    ready: true
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels:
    app: web
spec:
  replicas: 2
  # Paused: rkube up's deployment controller leaves it without ReplicaSets,
  # so the namespace holds exactly the objects listed here.
  paused: true
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 8080
        env:
        - name: MODE
          value: blue
      - name: sidecar
        image: busybox:1.36
        command: ["sleep", "infinity"]
"#;

/// [`APP_V1`] changed: ConfigMap data, Pod image + label, Deployment image,
/// env (changed and added) and label. Namespace, Service, EndpointSlice same.
pub const APP_V2: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: shop
data:
  mode: green
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: shop
  labels:
    app: web
    tier: frontend
spec:
  containers:
  - name: web
    image: nginx:1.26
    ports:
    - name: http
      containerPort: 8080
    env:
    - name: MODE
      value: blue
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels:
    app: web
spec:
  clusterIP: 10.96.100.10
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
    protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc12
  namespace: shop
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses:
  - 10.244.0.5
  conditions:
    ready: true
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels:
    app: web
    tier: frontend
spec:
  replicas: 2
  # Paused: rkube up's deployment controller leaves it without ReplicaSets,
  # so the namespace holds exactly the objects listed here.
  paused: true
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.26
        ports:
        - containerPort: 8080
        env:
        - name: MODE
          value: green
        - name: LOG_LEVEL
          value: debug
      - name: sidecar
        image: busybox:1.36
        command: ["sleep", "infinity"]
"#;

/// What `kubectl apply -f` of [`APP_V1`] prints on an empty server.
pub const APP_V1_CREATED: &[&str] = &[
    "namespace/shop created",
    "configmap/web-config created",
    "pod/web-0 created",
    "service/web created",
    "endpointslice.discovery.k8s.io/web-abc12 created",
    "deployment.apps/web created",
];

/// What `kubectl apply -f` of [`APP_V2`] prints after [`APP_V1`].
pub const APP_V2_CONFIGURED: &[&str] = &[
    "namespace/shop unchanged",
    "configmap/web-config configured",
    "pod/web-0 configured",
    "service/web unchanged",
    "endpointslice.discovery.k8s.io/web-abc12 unchanged",
    "deployment.apps/web configured",
];

/// A second Pod in the `default` namespace (for `-A`, `-l`, field selectors).
pub const DEFAULT_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: tools
  namespace: default
  labels:
    app: tools
spec:
  nodeName: node-a
  containers:
  - name: shell
    image: busybox:1.36
    command: ["sleep", "infinity"]
"#;

/// A ConfigMap manifest.
pub fn configmap(namespace: &str, name: &str, data: &[(&str, &str)]) -> String {
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata:\n");
    for (k, v) in data {
        s.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    s
}

/// A core/v1 Event in namespace `shop` about `kind`/`object` (with its uid),
/// from `default-scheduler`, last seen 2024-01-01.
pub fn event(
    name: &str,
    kind: &str,
    api_version: &str,
    object: &str,
    uid: &str,
    reason: &str,
    message: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: Event\nmetadata:\n  name: {name}\n  namespace: shop\ninvolvedObject:\n  apiVersion: {api_version}\n  kind: {kind}\n  name: {object}\n  namespace: shop\n  uid: {uid}\nreason: {reason}\nmessage: {message}\ntype: Normal\nsource:\n  component: default-scheduler\nfirstTimestamp: \"2024-01-01T00:00:00Z\"\nlastTimestamp: \"2024-01-01T00:00:00Z\"\ncount: 1\n"
    )
}

/// A Node with a Ready condition and a kubelet version (status may be set on
/// create for nodes).
pub const NODE_A: &str = r#"apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels:
    kubernetes.io/hostname: node-a
status:
  conditions:
  - type: Ready
    status: "True"
    reason: KubeletReady
    message: kubelet is posting ready status
    lastHeartbeatTime: "2024-01-01T00:00:00Z"
    lastTransitionTime: "2024-01-01T00:00:00Z"
  nodeInfo:
    kubeletVersion: v1.33.0
    kubeProxyVersion: v1.33.0
    architecture: amd64
    operatingSystem: linux
    osImage: Debian GNU/Linux 12 (bookworm)
    kernelVersion: 6.1.0
    containerRuntimeVersion: containerd://1.6.20
    machineID: m
    systemUUID: s
    bootID: b
  addresses:
  - type: InternalIP
    address: 10.0.0.10
"#;
