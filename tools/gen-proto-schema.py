#!/usr/bin/env python3
"""Derive rkube's Kubernetes protobuf schema table.

Reads the prost message definitions of the `k8s-pb` crate (field tags and wire
types) and the JSON field names of the `k8s-openapi` crate (its serde field
matches), both from the local cargo registry, and writes
crates/rkube-api/src/protobuf/schema.json: for every message reachable from the
API groups rkube serves, its fields as [tag, jsonName, kind, repeated, type].

Run after bumping either crate:  python3 tools/gen-proto-schema.py
"""
import glob, json, os, re, sys

reg = os.path.expanduser("~/.cargo/registry/src")
pb = sorted(glob.glob(f"{reg}/*/k8s-pb-0.9.*"))[-1] + "/src"
oa = sorted(glob.glob(f"{reg}/*/k8s-openapi-0.29.*"))[-1] + "/src/v1_33"

# snake_case Rust field -> JSON names seen in k8s-openapi ("podIP" => Field::Key_pod_ip)
json_names = {}
for path in glob.glob(f"{oa}/**/*.rs", recursive=True):
    for m in re.finditer(r'"([A-Za-z0-9$_-]+)" => Field::Key_([a-z0-9_]+)', open(path).read()):
        json_names.setdefault(m.group(2), set()).add(m.group(1))

def camel(snake):
    parts = snake.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])

by_lower = {}
for names in json_names.values():
    for n in names:
        by_lower.setdefault(n.lower(), set()).add(n)

def json_name(snake):
    snake = snake.removeprefix("r#")
    names = json_names.get(snake)
    if names and len(names) == 1:
        return next(iter(names))
    if not names:
        # k8s-pb and k8s-openapi split acronyms differently (pod_cid_rs vs pod_cidrs)
        same = by_lower.get(snake.replace("_", "").lower())
        if same and len(same) == 1:
            return next(iter(same))
    c = camel(snake)
    if names and c not in names:
        # ambiguous: prefer the candidate equal ignoring case
        for n in sorted(names):
            if n.lower() == c.lower():
                return n
    return c

messages = {}
field_re = re.compile(r'#\[prost\(([^)]*)\)\]\s*pub (r#)?([a-z0-9_]+):\s*([^;]+?),\n(?=\s*(?:///|#\[|$))')
for path in glob.glob(f"{pb}/**/mod.rs", recursive=True):
    module = os.path.relpath(os.path.dirname(path), pb).replace("/", ".")
    # Empty messages are written `pub struct X {}` on one line.
    src = re.sub(r'(pub struct \w+) \{\}', r'\1 {\n}', open(path).read())
    for sm in re.finditer(r'pub struct (\w+) \{(.*?)\n\}', src, re.S):
        name, body = sm.group(1), sm.group(2)
        fields = []
        for fm in field_re.finditer(body + "\n"):
            attrs, rname, rtype = fm.group(1), fm.group(3), re.sub(r"\s+", "", fm.group(4))
            tag = int(re.search(r'tag = "(\d+)"', attrs).group(1))
            repeated = "repeated" in attrs
            if attrs.startswith("btree_map"):
                kv = re.search(r'btree_map = "string, (\w+)"', attrs).group(1)
                kind = "map_" + kv
            else:
                kind = attrs.split(",")[0].strip()
                if kind.startswith("bytes"):
                    kind = "bytes"
            typ = None
            if kind in ("message", "map_message"):
                t = re.sub(r'::prost::alloc::(vec::Vec|boxed::Box|collections::BTreeMap)<', '', rtype)
                t = re.sub(r'::core::option::Option<', '', t)
                t = t.replace("::prost::alloc::string::String,", "").rstrip(">").rstrip(",").strip()
                parts = module.split(".")
                segs = t.split("::")
                while segs and segs[0] == "super":
                    parts.pop(); segs.pop(0)
                typ = ".".join(parts + segs)
            jname = json_name(rname)
            if name == "DaemonEndpoint" and jname == "port":
                jname = "Port"  # Go: `Port int32 json:"Port"`
            if name == "ConversionRequest" and jname == "desiredApiVersion":
                jname = "desiredAPIVersion"
            if name == "JsonSchemaProps" and jname in ("schema", "ref"):
                jname = "$" + jname  # Go: `json:"$schema"`, `json:"$ref"`
            # Go structs embedded with `json:",inline"`: a nested message on the
            # wire, flattened into the parent in JSON.
            inline = (jname in ("localObjectReference", "ephemeralContainerCommon")
                      or (name == "Volume" and jname == "volumeSource")
                      or (name == "PersistentVolumeSpec" and jname == "persistentVolumeSource")
                      or (name == "Probe" and typ and typ.endswith(".ProbeHandler"))
                      or (name == "RuleWithOperations" and jname == "rule")
                      or (name == "IngressRule" and jname == "ingressRuleValue")
                      or (name == "NamedRuleWithOperations" and jname == "ruleWithOperations"))
            fields.append([tag, jname, kind, repeated, typ] + ([True] if inline else []))
        messages[f"{module}.{name}"] = fields

# Every group version the resource table serves (crates/rkube-api/src/registry/builtin.rs).
roots = ["api.core.v1", "api.apps.v1", "api.discovery.v1", "api.coordination.v1", "api.rbac.v1",
         "api.authentication.v1", "api.authorization.v1", "api.autoscaling.v1", "api.autoscaling.v2", "api.batch.v1", "api.policy.v1", "api.events.v1",
         "api.admissionregistration.v1", "api.certificates.v1", "api.certificates.v1beta1", "api.flowcontrol.v1", "api.networking.v1",
         "api.node.v1", "api.scheduling.v1", "api.storage.v1", "kube_aggregator.pkg.apis.apiregistration.v1",
         "apimachinery.pkg.apis.meta.v1", "apiextensions_apiserver.pkg.apis.apiextensions.v1"]
keep, todo = {}, [m for m in messages if any(m.startswith(r + ".") for r in roots)]
while todo:
    m = todo.pop()
    if m in keep or m not in messages:
        continue
    keep[m] = messages[m]
    todo += [f[4] for f in messages[m] if f[4]]
missing = sorted({f[4] for fs in keep.values() for f in fs if f[4] and f[4] not in messages})
if missing:
    sys.exit(f"unresolved message types: {missing[:10]}")
out = os.path.join(os.path.dirname(__file__), "../crates/rkube-api/src/protobuf/schema.json")
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    json.dump({"source": "k8s-pb 0.9 tags + k8s-openapi 0.29 JSON names", "messages": dict(sorted(keep.items()))}, f, separators=(",", ":"))
print(f"{len(keep)} messages -> {out} ({os.path.getsize(out)} bytes)")
