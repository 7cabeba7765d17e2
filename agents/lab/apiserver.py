"""The Kubernetes-mode lab's API server: the test API server
(:mod:`agents.orchestrators.kubernetes.testserver`) as a process on the lab's address, doing
what kube-apiserver does for Kalena beyond storing objects:

* **Mutating admission from the stored configurations.** On every pod and Job CREATE it reads the
  MutatingWebhookConfigurations applied to it (``deploy/kubernetes/webhook.yaml``) and calls each
  webhook whose rules match (pods; batch/v1 jobs), with its ``objectSelector``, ``namespaceSelector`` (a
  namespace's ``kubernetes.io/metadata.name`` label included, as kube-apiserver sets it),
  ``failurePolicy``, ``timeoutSeconds`` and ``caBundle``; the client certificate comes from the
  kubeconfig that ``deploy/kubernetes/apiserver-admission.yaml`` names (``--admission-config``),
  its user picked by the webhook Service's DNS name, as kube-apiserver picks it. The Service is
  reached through the lab's Service map (``<state>/services.json``: ``name.namespace.svc:port`` →
  ``address:port``), the one substitution here.
* **TokenReview** from ``<state>/tokens.json`` (token → user, node, audiences), re-read on change:
  the service-account tokens the lab minted (projected agent tokens bound to their node).
* pods bound to a node are started by that node's kubelet double, not by the server
  (``run_bound_pods=False``); deletion is graceful (the kubelet finishes it).

Not modelled: webhooks for kinds other than pods and Jobs, reinvocation, matchConditions, ValidatingAdmissionPolicy evaluation (stored
only), authentication of ordinary requests and RBAC enforcement.

Run: ``python -m agents.lab.apiserver --address A --port P --state-dir D [--admission-config F]``.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from agents.orchestrators.kubernetes.testkubelet import MutatingWebhook, _selector_matches, token_reviews
from agents.orchestrators.kubernetes.testserver import TestAPIServer


class FileTokens(Mapping):
    """``tokens.json`` as a mapping, re-read when its modification time changes."""

    def __init__(self, path: Path) -> None:
        self.path, self._mtime, self._data = path, None, {}

    def _load(self) -> dict:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return {}
        if mtime != self._mtime:
            self._data, self._mtime = json.loads(self.path.read_text()), mtime
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def admission_clients(config_file: str | None) -> dict[str, tuple[str, str]]:
    """kubeconfig user name (a Service DNS name, optionally ``:port``) → (client cert, key) from the
    AdmissionConfiguration file's MutatingAdmissionWebhook plugin and the kubeconfig it names."""
    if not config_file:
        return {}
    docs = [d for d in yaml.safe_load_all(Path(config_file).read_text()) if d]
    out: dict[str, tuple[str, str]] = {}
    for doc in docs:
        if doc.get("kind") != "AdmissionConfiguration":
            continue
        for plugin in doc.get("plugins") or []:
            if plugin.get("name") != "MutatingAdmissionWebhook":
                continue
            kubeconfig = Path((plugin.get("configuration") or {}).get("kubeConfigFile", ""))
            for user in (yaml.safe_load(kubeconfig.read_text()) or {}).get("users") or []:
                u = user.get("user") or {}
                out[user["name"]] = (u.get("client-certificate", ""), u.get("client-key", ""))
    return out


class StoredWebhooks:
    """A ``pod_create_hooks`` entry calling the webhooks the stored configurations declare."""

    def __init__(self, server: TestAPIServer, services: Path, clients: dict[str, tuple[str, str]]) -> None:
        self.server, self.services, self.clients = server, services, clients
        self._ca_files: dict[str, str] = {}
        self.calls = 0

    def _ca_file(self, bundle: str) -> str:
        if bundle not in self._ca_files:
            handle = tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False)  # noqa: SIM115
            handle.write(base64.b64decode(bundle))
            handle.close()
            self._ca_files[bundle] = handle.name
        return self._ca_files[bundle]

    def jobs(self, job: dict) -> dict | None:
        """The same for a Job CREATE (``batch/v1 jobs``: the podFailurePolicy webhook)."""
        return self(job, group="batch", kind="Job", resource="jobs")

    def __call__(self, pod: dict, *, group: str = "", kind: str = "Pod", resource: str = "pods") -> dict | None:
        namespace = (pod.get("metadata") or {}).get("namespace", "default")
        ns_labels = {"kubernetes.io/metadata.name": namespace}
        try:
            ns_labels.update((self.server.get("namespaces", namespace).get("metadata") or {}).get("labels") or {})
        except Exception:  # noqa: BLE001 - no such namespace object: the name label alone
            pass
        services = json.loads(self.services.read_text()) if self.services.exists() else {}
        for config in self.server.objects("mutatingwebhookconfigurations"):
            for hook in config.get("webhooks") or []:
                if not any(resource in (r.get("resources") or []) and "CREATE" in (r.get("operations") or [])
                           and group in (r.get("apiGroups") or []) for r in hook.get("rules") or []):
                    continue
                if not _selector_matches(hook.get("namespaceSelector"), ns_labels):
                    continue
                client = hook.get("clientConfig") or {}
                svc = client.get("service") or {}
                dns = f"{svc.get('name')}.{svc.get('namespace')}.svc"
                target = services.get(f"{dns}:{svc.get('port', 443)}")
                url = client.get("url") or (f"https://{target}{svc.get('path', '/')}" if target else "")
                cert, key = self.clients.get(f"{dns}:{svc.get('port', 443)}") or self.clients.get(dns) or ("", "")
                webhook = MutatingWebhook(
                    url=url or f"https://{dns}:{svc.get('port', 443)}{svc.get('path', '/')}",
                    ca_file=self._ca_file(client["caBundle"]) if client.get("caBundle") else "",
                    client_cert_file=cert, client_key_file=key, object_selector=hook.get("objectSelector") or {},
                    failure_policy=hook.get("failurePolicy", "Fail"), timeout_s=float(hook.get("timeoutSeconds", 10)),
                    name=hook.get("name", ""), group=group, kind=kind, resource=resource)
                self.calls += 1
                changed = webhook(pod)
                if webhook.failures:
                    print(f"apiserver: webhook {webhook.name} failed ({webhook.failure_policy}): {webhook.last_error}",
                          file=sys.stderr, flush=True)
                if changed is not None:
                    pod = changed
        return pod


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.lab.apiserver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state-dir", type=Path, required=True, help="tokens.json and services.json live here")
    parser.add_argument("--admission-config", default="", help="kube-apiserver's --admission-control-config-file")
    parser.add_argument("--grace-scale", type=float, default=1.0, help="graceful deletion: grace × this")
    args = parser.parse_args(argv)
    server = TestAPIServer(host=args.address, port=args.port, graceful=True, run_bound_pods=False,
                           record_bodies=False, grace_scale=args.grace_scale)
    token_reviews(server, FileTokens(args.state_dir / "tokens.json"))
    webhooks = StoredWebhooks(server, args.state_dir / "services.json", admission_clients(args.admission_config))
    server.pod_create_hooks.append(webhooks)
    server.create_hooks.setdefault("jobs", []).append(webhooks.jobs)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    server.start()
    print(f"apiserver: serving {server.url}", flush=True)
    while not done.wait(30.0):  # the request logs are the test server's; a lab keeps their tail only
        for log in (server.requests, server.request_log, server.queries, server.answers):
            del log[:-2000]
        server.calls.clear()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
