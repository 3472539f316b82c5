//! One manifest holding every kind a typical application and its cluster
//! setup use: `kubectl apply` creates them all, a second apply writes
//! nothing, `kubectl get all` lists the workload kinds.

use std::collections::BTreeMap;

use crate::common::{lines, Cluster, Kubectl};

/// Every kind the manifest holds, as `kubectl get` names them, in manifest order.
const KINDS: &[(&str, &str)] = &[
    ("namespace", "every"),
    ("priorityclass.scheduling.k8s.io", "app-high"),
    ("storageclass.storage.k8s.io", "local-fast"),
    ("ingressclass.networking.k8s.io", "example"),
    ("runtimeclass.node.k8s.io", "host"),
    ("csidriver.storage.k8s.io", "csi.example.com"),
    ("clusterrole.rbac.authorization.k8s.io", "every-reader"),
    ("clusterrolebinding.rbac.authorization.k8s.io", "every-reader"),
    ("persistentvolume", "every-pv"),
    ("serviceaccount", "app"),
    ("role.rbac.authorization.k8s.io", "app"),
    ("rolebinding.rbac.authorization.k8s.io", "app"),
    ("configmap", "app-config"),
    ("secret", "app-secret"),
    ("limitrange", "limits"),
    ("resourcequota", "quota"),
    ("persistentvolumeclaim", "data"),
    ("service", "web"),
    ("pod", "solo"),
    ("podtemplate", "template"),
    ("replicationcontroller", "legacy"),
    ("deployment.apps", "web"),
    ("replicaset.apps", "cache"),
    ("statefulset.apps", "db"),
    ("daemonset.apps", "agent"),
    ("job.batch", "migrate"),
    ("cronjob.batch", "nightly"),
    ("horizontalpodautoscaler.autoscaling", "web"),
    ("ingress.networking.k8s.io", "web"),
    ("networkpolicy.networking.k8s.io", "deny-all"),
    ("poddisruptionbudget.policy", "web"),
    ("lease.coordination.k8s.io", "leader"),
];

const MANIFEST: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: every
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: app-high
value: 100000
description: app pods
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-fast
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: example
spec:
  controller: example.com/ingress-controller
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: host
handler: runc
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: csi.example.com
spec:
  attachRequired: false
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: every-reader
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: every-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: every-reader
subjects:
- kind: ServiceAccount
  name: app
  namespace: every
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: every-pv
spec:
  capacity:
    storage: 1Gi
  accessModes: ["ReadWriteOnce"]
  storageClassName: local-fast
  hostPath:
    path: /tmp/every-pv
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: app
  namespace: every
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: app
  namespace: every
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: app
  namespace: every
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: app
subjects:
- kind: ServiceAccount
  name: app
  namespace: every
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  namespace: every
data:
  mode: blue
---
apiVersion: v1
kind: Secret
metadata:
  name: app-secret
  namespace: every
type: Opaque
data:
  password: cGFzc3dvcmQ=
---
apiVersion: v1
kind: LimitRange
metadata:
  name: limits
  namespace: every
spec:
  limits:
  - type: Container
    max:
      cpu: "2"
---
apiVersion: v1
kind: ResourceQuota
metadata:
  name: quota
  namespace: every
spec:
  hard:
    pods: "50"
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: every
spec:
  accessModes: ["ReadWriteOnce"]
  storageClassName: local-fast
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: every
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: solo
  namespace: every
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
---
apiVersion: v1
kind: PodTemplate
metadata:
  name: template
  namespace: every
template:
  metadata:
    labels:
      app: templated
  spec:
    containers:
    - name: main
      image: busybox:1.36
---
apiVersion: v1
kind: ReplicationController
metadata:
  name: legacy
  namespace: every
spec:
  replicas: 1
  selector:
    app: legacy
  template:
    metadata:
      labels:
        app: legacy
    spec:
      containers:
      - name: main
        image: busybox:1.36
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: every
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      priorityClassName: app-high
      serviceAccountName: app
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 8080
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: cache
  namespace: every
spec:
  replicas: 1
  selector:
    matchLabels:
      app: cache
  template:
    metadata:
      labels:
        app: cache
    spec:
      containers:
      - name: cache
        image: redis:7
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: every
spec:
  serviceName: web
  replicas: 1
  selector:
    matchLabels:
      app: db
  template:
    metadata:
      labels:
        app: db
    spec:
      containers:
      - name: db
        image: postgres:16
  volumeClaimTemplates:
  - metadata:
      name: pgdata
    spec:
      accessModes: ["ReadWriteOnce"]
      resources:
        requests:
          storage: 1Gi
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: every
spec:
  selector:
    matchLabels:
      app: agent
  template:
    metadata:
      labels:
        app: agent
    spec:
      containers:
      - name: agent
        image: busybox:1.36
---
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  namespace: every
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: busybox:1.36
        command: ["true"]
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  namespace: every
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: backup
            image: busybox:1.36
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
  namespace: every
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: web
  minReplicas: 2
  maxReplicas: 5
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: every
spec:
  ingressClassName: example
  rules:
  - host: web.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: deny-all
  namespace: every
spec:
  podSelector: {}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
  namespace: every
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app: web
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: leader
  namespace: every
spec:
  holderIdentity: web-0
"#;

/// `(resourceVersion, generation)` of every object of [`KINDS`].
fn versions(k: &Kubectl) -> BTreeMap<String, (String, i64)> {
    KINDS
        .iter()
        .map(|(kind, name)| {
            let mut args = vec!["get", kind, name, "-o", "json"];
            let cluster_scoped = matches!(
                *kind,
                "namespace" | "persistentvolume" | "priorityclass.scheduling.k8s.io" | "storageclass.storage.k8s.io"
                    | "ingressclass.networking.k8s.io" | "runtimeclass.node.k8s.io" | "csidriver.storage.k8s.io"
                    | "clusterrole.rbac.authorization.k8s.io" | "clusterrolebinding.rbac.authorization.k8s.io"
            );
            if !cluster_scoped {
                args.extend(["-n", "every"]);
            }
            let obj = k.json(&args);
            let mut rv = obj.pointer("/metadata/resourceVersion").and_then(|v| v.as_str()).unwrap_or("").to_string();
            if *kind == "resourcequota" {
                // Its status is written by the quota controller and the
                // ResourceQuota admission plugin as the namespace's pods come
                // and go (as upstream), which moves the resourceVersion. What
                // an apply writes is the spec and its non-status managedFields:
                // those must not change.
                let applied: Vec<&serde_json::Value> = obj
                    .pointer("/metadata/managedFields")
                    .and_then(|m| m.as_array())
                    .into_iter()
                    .flatten()
                    .filter(|f| f.get("subresource").and_then(|s| s.as_str()) != Some("status"))
                    .collect();
                rv = serde_json::json!({"spec": obj["spec"], "managedFields": applied}).to_string();
            }
            let generation = obj.pointer("/metadata/generation").and_then(|v| v.as_i64()).unwrap_or(0);
            (format!("{kind}/{name}"), (rv, generation))
        })
        .collect()
}

/// `kubectl apply` creates every kind; applying again writes nothing; `get all`
/// lists the workload kinds.
pub fn apply_every_kind_then_reapply_writes_nothing(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("every.yaml", MANIFEST);
    let out = k.ok(&["apply", "-f", f.to_str().unwrap()]);
    let created: Vec<String> = KINDS.iter().map(|(kind, name)| format!("{kind}/{name} created")).collect();
    assert_eq!(lines(&out.stdout), created, "first apply; stderr: {}", out.stderr);

    let before = versions(k);
    let out = k.ok(&["apply", "-f", f.to_str().unwrap()]);
    for (line, (kind, name)) in lines(&out.stdout).iter().zip(KINDS) {
        // kubectl's client-side diff reports `configured` where an atomic list
        // differs from the defaulted live object (volumeClaimTemplates), as
        // against kube-apiserver; the server still writes nothing.
        let configured_ok = *kind == "statefulset.apps";
        let unchanged = format!("{kind}/{name} unchanged");
        let configured = format!("{kind}/{name} configured");
        assert!(
            *line == unchanged || (configured_ok && *line == configured),
            "second apply: {line:?}; stdout: {}",
            out.stdout
        );
    }
    assert_eq!(versions(k), before, "a second apply changes no resourceVersion (ResourceQuota: spec and applied fields) or generation");

    let all = k.ok(&["get", "all", "-n", "every", "-o", "name"]);
    let names = lines(&all.stdout);
    for want in [
        "pod/solo",
        "service/web",
        "replicationcontroller/legacy",
        "daemonset.apps/agent",
        "deployment.apps/web",
        "replicaset.apps/cache",
        "statefulset.apps/db",
        "horizontalpodautoscaler.autoscaling/web",
        "cronjob.batch/nightly",
        "job.batch/migrate",
    ] {
        assert!(names.iter().any(|n| n == want), "`kubectl get all` lacks {want}: {names:?}");
    }
}
