"""A small Kubernetes API stand-in that serves real Kubernetes JSON shapes over HTTP.

No API server, kind or kwok can run on the development machines, so the Kubernetes adapter is
tested against this: a ThreadingHTTPServer answering the paths the adapter uses with objects
shaped as the Kubernetes API reference documents them (core/v1 NodeList, PodList, Pod, Status;
the pods/binding and pods/eviction subresources, which answer with a ``Status``). Sources:
https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/ ,
https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/ ,
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/ ,
https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/ .
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


def node(name: str, ready: bool = True) -> dict:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "lastHeartbeatTime": "2026-11-29T08:00:00Z", "lastTransitionTime": "2026-11-29T07:00:00Z",
                            "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
        },
    }


def pod(namespace: str, name: str, node_name: str = "", *, tier: str | None = None, priority: str | None = None,
        owner_kind: str = "ReplicaSet", phase: str = "Running") -> dict:
    labels = {"app": name.rsplit("-", 1)[0]}
    if tier:
        labels["kalena.naughtian.io/tier"] = tier
    annotations = {"kalena.naughtian.io/priority": priority} if priority is not None else {}
    spec = {"containers": [{"name": "main", "image": "busybox:1.36",
                            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                          "limits": {"cpu": "1", "memory": "1Gi"}}}],
            "schedulerName": "kalena" if tier == "batch" else "default-scheduler"}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "resourceVersion": "7",
                     "labels": labels, "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "owner", "uid": "u1",
                                          "controller": True}]},
        "spec": spec,
        "status": {"phase": phase if node_name else "Pending"},
    }


def status(code: int, reason: str, message: str) -> dict:
    return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}


class KubeAPI:
    """State (nodes, pods), a request log, and the HTTP server; use as a context manager."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict | None]] = []
        self.pdb_blocks: set[str] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> KubeAPI:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                return

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                api.requests.append(("GET", url.path, None))
                with api.lock:
                    if url.path == "/api/v1/nodes":
                        return self._send(200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "9"},
                                                "items": list(api.nodes.values())})
                    if url.path == "/api/v1/pods":
                        selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                        items = list(api.pods.values())
                        if selector.startswith("spec.nodeName="):
                            wanted = selector.split("=", 1)[1]
                            items = [p for p in items if p["spec"].get("nodeName", "") == wanted]
                        return self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
                                                "items": items})
                self._send(404, status(404, "NotFound", f"the server could not find the requested resource {url.path}"))

            def do_POST(self) -> None:
                url = urlparse(self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                api.requests.append(("POST", url.path, body))
                parts = url.path.strip("/").split("/")
                # /api/v1/namespaces/{ns}/pods/{name}/{binding|eviction}
                if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
                    kinds = {"binding": ("v1", "Binding"), "eviction": ("policy/v1", "Eviction")}
                    if (body.get("apiVersion"), body.get("kind")) != kinds.get(parts[6]):
                        return self._send(400, status(400, "BadRequest", "Object 'Kind' is missing or wrong"))
                    key = f"{parts[3]}/{parts[5]}"
                    with api.lock:
                        target = api.pods.get(key)
                        if target is None:
                            return self._send(404, status(404, "NotFound", f'pods "{parts[5]}" not found'))
                        if parts[6] == "binding":
                            if target["spec"].get("nodeName"):
                                return self._send(409, status(409, "Conflict",
                                                              f'pod {parts[5]} is already assigned to node "{target["spec"]["nodeName"]}"'))
                            target["spec"]["nodeName"] = body["target"]["name"]
                            target["status"]["phase"] = "Running"
                            return self._send(201, status(201, "", "") | {"status": "Success"})
                        if parts[6] == "eviction":
                            if key in api.pdb_blocks:
                                return self._send(429, status(429, "TooManyRequests",
                                                              "Cannot evict pod as it would violate the pod's disruption budget."))
                            del api.pods[key]
                            return self._send(201, status(201, "", "") | {"status": "Success"})
                self._send(404, status(404, "NotFound", f"the server could not find the requested resource {url.path}"))

        return Handler
