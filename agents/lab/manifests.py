"""The Kubernetes-mode lab's processes, derived from the objects ``deploy/kubernetes`` and
``deploy/agent`` created on the lab's API server (pure: objects in, command lines out).

Kubernetes runs each container of a pod template as ``image entrypoint + command/args`` with the
environment of ``envFrom`` then ``env`` (``$(VAR)`` expanded in command and args), its volumes
mounted and its probes run by the kubelet. The lab runs the same container as a local process,
and every value comes from the object except these substitutions, each recorded on the
:class:`Process` it changed (``substitutions``) and printed by ``kalena lab status``:

* **Service DNS names → loopback addresses**: ``<service>.<namespace>.svc[.cluster.local]`` (with
  the Service port, or the scheme's default port 80/443) → the address of the process backing
  the Service's selector and its ``targetPort`` (``ws://kalena.kalena.svc/…`` → ``ws://A:8000/…``).
  A pod's own addresses (``0.0.0.0``, ``127.0.0.1``: its network namespace) → the pod's
  loopback address, since the lab's processes share one network namespace.
* **HOST_IP → the node's address** (``fieldRef: status.hostIP``); ``spec.nodeName`` is the node's
  name, ``metadata.*`` the pod's, as the kubelet gives them.
* **hostPath and cgroup roots → the node's subtree**: a hostPath volume → the same host path
  (``/sys/fs/cgroup``, ``/proc``) or, for state (``/var/lib/…``), the node's directory; a
  secret / projected / service-account volume → files in the process's directory; a path inside
  the container's own filesystem (``/tmp``, the image's ``/var/lib/kalena``) → the process's
  directory; the agent's ``--node-cgroup`` and ``--kube-cgroup-root`` → under the node's cgroup,
  and its ``--kube-cgroup-driver`` → the kubelet double's (``cgroupfs``: ``kubepods.slice`` →
  ``<node>/kubepods``).
* **``--reserved`` → the Node's capacity − allocatable** (0: the kubelet double keeps nothing for
  the system), and the machine the agent would read from ``/proc`` → the node's capacity
  (``--capacity``); the agent then takes its DaemonSets' requests off that capacity itself, as
  the console's ledger does.
* **images → local commands**: the image's entrypoint and environment (:data:`IMAGES`, the
  Dockerfiles' ``ENTRYPOINT`` / ``ENV``) → this checkout's Python; the in-cluster API config
  (``--kube-in-cluster``, the service-account mount) → the lab API server's URL and a token file.

Not applied (recorded per process in ``ignored``): ``resources`` (the control plane's processes
run in the host's cgroups), ``securityContext``, ``hostPID``, ``priorityClassName``,
``tolerations``, ``ports`` beyond naming probe targets, and ``replicas`` above ``replicas_cap``.
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.lab.errors import LabError

#: image (name without tag) → its entrypoint as a local command, and the image's ENV that matters
#: to a process (deploy/Dockerfile, deploy/agent/Dockerfile; tests/agents/lab/test_lab_manifests.py
#: checks both against the files). Paths inside the image are made the process's directory.
IMAGES: dict[str, dict[str, Any]] = {
    "kalena/control-plane": {
        "entrypoint": ["kalena"],
        "env": {"DJANGO_SETTINGS_MODULE": "kalena_web.settings", "KALENA_VAR_DIR": "/var/lib/kalena",
                "KALENA_HEARTBEAT_DIR": "/tmp/kalena-heartbeat", "PYTHONUNBUFFERED": "1"}},
    "kalena/agent": {"entrypoint": ["kalena-agent"], "env": {"PYTHONUNBUFFERED": "1"}},
}
#: the image's programs → this checkout's
PROGRAMS: dict[str, list[str]] = {
    "kalena": [sys.executable, "-m", "kalena_web.cli"],
    "kalena-agent": [sys.executable, "-m", "agents.cli"],
    "celery": [sys.executable, "-m", "celery"],
}
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_SVC = re.compile(r"(?P<scheme>[a-z]+://)?(?P<name>[a-z0-9-]+)\.(?P<ns>[a-z0-9-]+)\.svc(?:\.cluster\.local)?"
                  r"(?::(?P<port>\d+))?")
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SCHEME_PORT = {"http://": 80, "ws://": 80, "https://": 443, "wss://": 443}


@dataclass(frozen=True)
class Probe:
    """One probe as the kubelet runs it: ``kind`` ``http`` (``url``) or ``exec`` (``argv``)."""

    which: str
    kind: str
    url: str = ""
    argv: tuple[str, ...] = ()
    period_s: float = 10.0
    failure_threshold: int = 3
    timeout_s: float = 1.0
    initial_delay_s: float = 0.0


@dataclass
class Process:
    """One container of one pod template, as the lab runs it (see module doc)."""

    name: str                     # <workload name>[-<node>]: the lab's name for the process
    workload: str                 # "Deployment kalena/kalena-console"
    container: str
    argv: list[str]
    env: dict[str, str]
    address: str
    directory: str
    files: dict[str, bytes] = field(default_factory=dict)     # local path → content (mounted volumes)
    probes: dict[str, Probe] = field(default_factory=dict)    # startup / readiness / liveness
    substitutions: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    replicas: int = 1
    run_to_completion: bool = False
    backoff_limit: int = 0
    node: str = ""


@dataclass(frozen=True)
class Placement:
    """Where one pod of a template runs in the lab: its ``address``, its ``directory`` (its
    container filesystem and mounts), and for a DaemonSet's pod the node's record."""

    address: str
    directory: str
    node: Mapping[str, Any] | None = None


@dataclass
class Cluster:
    """What the derivation reads besides the template: ConfigMaps and Secrets (``ns/name`` →
    data, Secrets decoded), Services (``ns/name`` → the object), each workload's pod address,
    pod-template labels and named container ports, the API server, the service-account tokens (``ns/name`` of
    the ServiceAccount → token; ``(ns/name, audience, node)`` → a projected token), and the kubelet's
    URL scheme."""

    config_maps: dict[str, dict[str, str]]
    secrets: dict[str, dict[str, bytes]]
    services: dict[str, dict]
    workloads: dict[str, dict[str, Any]]    # "ns/name" → {"address", "labels", "ports": {name: number}}
    api_url: str
    tokens: dict[str, str]
    projected_token: Any               # (service account "ns/name", audience, node name) -> token
    kubelet_scheme: str = "http"
    kubelet_port: int = 10250
    kubelet_cgroup_driver: str = "cgroupfs"   # the kubelet double's (agents.lab.kubelet: cgroupfs naming)
    #: the agents' clocks divided by the lab's speed (``--sampling-interval-s=1`` …; a day's time
    #: compression, kalena_engine.labslice.compression), appended to the agent's args
    agent_flags: tuple[str, ...] = ()


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class _Deriver:
    def __init__(self, cluster: Cluster, workload: Mapping[str, Any], kind: str, placement: Placement) -> None:
        self.cluster, self.workload, self.kind, self.placement = cluster, workload, kind, placement
        self.namespace = (workload.get("metadata") or {}).get("namespace") or "default"
        self.template = (workload.get("spec") or {}).get("template") or {}
        self.spec = self.template.get("spec") or {}
        self.subs: list[str] = []
        self.mounts: dict[str, str] = {}     # mountPath → local directory
        self.files: dict[str, bytes] = {}

    # -- substitutions ---------------------------------------------------------------------------

    def note(self, text: str) -> None:
        if text not in self.subs:
            self.subs.append(text)

    def service(self, match: re.Match) -> str:
        name, ns, scheme = match["name"], match["ns"], match["scheme"] or ""
        svc = self.cluster.services.get(f"{ns}/{name}")
        if svc is None:
            raise LabError(f"{match[0]!r} names no Service of the applied objects", source=self.where(),
                           field="Service DNS name")
        port = int(match["port"]) if match["port"] else _SCHEME_PORT.get(scheme)
        selector = (svc.get("spec") or {}).get("selector") or {}
        backing = [k for k, w in self.cluster.workloads.items() if k.split("/")[0] == ns and
                   selector and all(w["labels"].get(a) == b for a, b in selector.items())]
        if not backing:
            raise LabError(f"Service {ns}/{name} selects no process of the lab", source=self.where(),
                           field="spec.selector")
        address = self.cluster.workloads[backing[0]]["address"]
        target = None
        for p in (svc.get("spec") or {}).get("ports") or []:
            if port is None or int(p.get("port")) == port:
                target = self._target_port(backing[0], p.get("targetPort", p.get("port")))
                break
        if not scheme and not match["port"]:
            target = None  # a bare host name (an allowed host, a TLS server name): the address alone
        out = scheme + address + (f":{target}" if target is not None else "")
        self.note(f"Service DNS name {match[0]} → {out[len(scheme):]} (process {backing[0]})")
        return out

    def _target_port(self, workload_key: str, target: Any) -> int:
        if isinstance(target, int) or str(target).isdigit():
            return int(target)
        ports = self.cluster.workloads[workload_key].get("ports") or {}
        if target in ports:
            return int(ports[target])
        raise LabError(f"targetPort {target!r} is no named port of {workload_key}", source=self.where(),
                       field="spec.ports[].targetPort")

    def value(self, text: str) -> str:
        """A value with the network and path substitutions applied."""
        # the pod's own addresses first, as whole addresses: a Service's lab address (127.0.0.101 on
        # the default subnet) must not be taken for the pod's 127.0.0.1
        for own in ("0.0.0.0", "127.0.0.1"):  # noqa: S104 - the pod's own addresses, named as written
            pattern = re.compile(r"(?<![\d.])" + re.escape(own) + r"(?![\d])")
            if pattern.search(text):
                text = pattern.sub(self.placement.address, text)
                self.note(f"pod address {own} → {self.placement.address}")
        text = _SVC.sub(self.service, text)
        written = text
        for mount in sorted(self.mounts, key=len, reverse=True):
            if text == mount or text.startswith(mount + "/") or ("=" + mount) in text:
                local = self.mounts[mount]
                text = text.replace(mount, local)
                self.note(f"mount {mount} → {local}")
        if text != written:
            return text
        flag, eq, path = text.rpartition("=") if text.startswith("--") else ("", "", text)
        if path.startswith("/tmp/"):  # the image's own /tmp (e.g. beat's --schedule): the process's
            local = self.placement.directory + "/fs" + path
            self.note(f"image path {path} → {local}")
            return flag + eq + local
        return text

    def where(self) -> str:
        return f"{self.kind} {_key(self.workload)}"

    # -- volumes -------------------------------------------------------------------------------

    def volumes(self, container: Mapping[str, Any]) -> None:
        volumes = {v["name"]: v for v in self.spec.get("volumes") or []}
        base = self.placement.directory
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise LabError(f"volumeMount {mount['name']!r} names no volume", source=self.where(),
                               field="spec.template.spec.volumes")
            path = mount["mountPath"]
            local = base + "/mounts" + path
            if "hostPath" in volume:
                host = volume["hostPath"]["path"]
                if host.startswith(("/sys/", "/proc")) or host in ("/proc", "/sys"):
                    local = host
                    self.note(f"mount {path} → {host} (hostPath {host}: the host's own; the node's subtree is "
                              "named by the cgroup flags)")
                else:
                    node_dir = (self.placement.node or {}).get("directory", base)
                    local = f"{node_dir}/host{host}"
                    self.note(f"hostPath {host} at {path} → {local} (the node's directory)")
            elif "secret" in volume:
                self._secret_files(volume["secret"], local)
                self.note(f"Secret {volume['secret']['secretName']} at {path} → {local}")
            elif "configMap" in volume:
                data = self.cluster.config_maps.get(f"{self.namespace}/{volume['configMap']['name']}") or {}
                for k, v in data.items():
                    self.files[f"{local}/{k}"] = v.encode()
                self.note(f"ConfigMap {volume['configMap']['name']} at {path} → {local}")
            elif "projected" in volume:
                for source in volume["projected"].get("sources") or []:
                    sat = source.get("serviceAccountToken")
                    if sat is not None:
                        token = self.cluster.projected_token(self.service_account(), sat.get("audience", ""),
                                                             (self.placement.node or {}).get("name", ""))
                        self.files[f"{local}/{sat['path']}"] = token.encode()
                        self.note(f"projected service-account token (audience {sat.get('audience')}) at {path} → "
                                  f"{local}/{sat['path']} (a token the lab's API server reviews)")
            elif "emptyDir" in volume:
                self.note(f"emptyDir at {path} → {local}")
            else:
                raise LabError(f"volume {mount['name']!r} is of a kind the lab does not mount", source=self.where(),
                               field="spec.template.spec.volumes", accepted="hostPath, secret, configMap, projected, "
                                                                           "emptyDir")
            self.mounts[path] = local
        sa = self.service_account()
        if sa and self.spec.get("automountServiceAccountToken", True) is not False:
            local = base + "/mounts" + SA_MOUNT
            self.files[f"{local}/token"] = self.cluster.tokens.get(sa, "").encode()
            self.files[f"{local}/namespace"] = self.namespace.encode()
            self.mounts.setdefault(SA_MOUNT, local)

    def _secret_files(self, spec: Mapping[str, Any], local: str) -> None:
        data = self.cluster.secrets.get(f"{self.namespace}/{spec['secretName']}")
        if data is None:
            raise LabError(f"Secret {self.namespace}/{spec['secretName']} is missing", source=self.where(),
                           field="volumes[].secret.secretName")
        items = spec.get("items")
        pairs = [(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]
        for key, path in pairs:
            self.files[f"{local}/{path}"] = data[key]

    def service_account(self) -> str:
        name = self.spec.get("serviceAccountName") or self.spec.get("serviceAccount") or "default"
        return f"{self.namespace}/{name}"

    # -- environment ---------------------------------------------------------------------------

    def env(self, container: Mapping[str, Any], image_env: Mapping[str, str]) -> dict[str, str]:
        env: dict[str, str] = {}
        for k, v in image_env.items():
            env[k] = v
            if v.startswith("/"):
                env[k] = self.placement.directory + "/fs" + v
                self.note(f"image path {v} ({k}) → {env[k]}")
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                data = self.cluster.config_maps.get(f"{self.namespace}/{source['configMapRef']['name']}")
                if data is None:
                    raise LabError(f"ConfigMap {source['configMapRef']['name']} is missing", source=self.where(),
                                   field="envFrom")
                env.update({prefix + k: self.value(v) for k, v in data.items()})
            elif "secretRef" in source:
                data = self.cluster.secrets.get(f"{self.namespace}/{source['secretRef']['name']}")
                if data is None:
                    raise LabError(f"Secret {source['secretRef']['name']} is missing", source=self.where(),
                                   field="envFrom")
                env.update({prefix + k: v.decode() for k, v in data.items()})
        for item in container.get("env") or []:
            name = item["name"]
            if "value" in item:
                env[name] = self.value(_VAR.sub(lambda m: env.get(m[1], m[0]), str(item["value"])))
                continue
            ref = item.get("valueFrom") or {}
            if "secretKeyRef" in ref:
                s = ref["secretKeyRef"]
                env[name] = self.cluster.secrets[f"{self.namespace}/{s['name']}"][s["key"]].decode()
            elif "configMapKeyRef" in ref:
                c = ref["configMapKeyRef"]
                env[name] = self.cluster.config_maps[f"{self.namespace}/{c['name']}"][c["key"]]
            elif "fieldRef" in ref:
                env[name] = self.field_ref(ref["fieldRef"]["fieldPath"], name)
            else:
                raise LabError(f"env {name} has a valueFrom the lab does not resolve", source=self.where(),
                               field=f"env[{name}]")
        return env

    def field_ref(self, path: str, name: str) -> str:
        node = self.placement.node or {}
        meta = self.workload.get("metadata") or {}
        if path == "status.hostIP":
            address = node.get("address", self.placement.address)
            self.note(f"HOST_IP ({name}, status.hostIP) → {address} (the node's address)")
            return address
        if path == "status.podIP":
            return self.placement.address
        if path == "spec.nodeName":
            return node.get("name", "")
        if path == "metadata.namespace":
            return self.namespace
        if path == "metadata.name":
            return meta.get("name", "")
        if path == "spec.serviceAccountName":
            return self.service_account().split("/", 1)[1]
        raise LabError(f"fieldRef {path!r} is not one the lab gives", source=self.where(), field=f"env[{name}]")

    # -- the command line ----------------------------------------------------------------------

    def argv(self, container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
        image = container.get("image", "").rsplit(":", 1)[0]
        if image not in IMAGES:
            raise LabError(f"image {container.get('image')!r} has no local command", source=self.where(),
                           field="image", accepted=", ".join(IMAGES))
        command = container.get("command") or IMAGES[image]["entrypoint"]
        args = container.get("args") if container.get("args") is not None else []
        if not container.get("command") and container.get("args") is None:
            raise LabError("a container without command or args runs the image's CMD, which the lab does not "
                           "model", source=self.where(), field=f"containers[{container.get('name')}]")
        words = [_VAR.sub(lambda m: env.get(m[1], m[0]), str(w)) for w in [*command, *args]]
        program = PROGRAMS.get(words[0])
        if program is None:
            raise LabError(f"{words[0]!r} is no program of image {image}", source=self.where(), field="command")
        self.note(f"image {container.get('image')} → local command {' '.join(program[1:])} ({words[0]})")
        return [*program, *(self.value(w) for w in words[1:])]

    def probe(self, which: str, spec: Mapping[str, Any], container: Mapping[str, Any],
              env: Mapping[str, str]) -> Probe:
        common = {"period_s": float(spec.get("periodSeconds", 10)),
                  "failure_threshold": int(spec.get("failureThreshold", 3)),
                  "timeout_s": float(spec.get("timeoutSeconds", 1)),
                  "initial_delay_s": float(spec.get("initialDelaySeconds", 0))}
        if "httpGet" in spec:
            get = spec["httpGet"]
            port = get["port"]
            if not str(port).isdigit():
                named = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
                if port not in named:
                    raise LabError(f"probe port {port!r} is no named port", source=self.where(),
                                   field=f"{which}Probe.httpGet.port")
                port = named[port]
            scheme = str(get.get("scheme", "HTTP")).lower()
            return Probe(which, "http", url=f"{scheme}://{self.placement.address}:{port}{get.get('path', '/')}",
                         **common)
        if "exec" in spec:
            words = [str(w) for w in spec["exec"]["command"]]
            program = PROGRAMS.get(words[0])
            if program is None:
                raise LabError(f"probe program {words[0]!r} is no program of the image", source=self.where(),
                               field=f"{which}Probe.exec.command")
            return Probe(which, "exec", argv=(*program, *(self.value(w) for w in words[1:])), **common)
        raise LabError("a probe the lab does not run", source=self.where(), field=f"{which}Probe",
                       accepted="httpGet, exec")


def derive(cluster: Cluster, workload: Mapping[str, Any], kind: str, placement: Placement, *, name: str,
           replicas_cap: int = 1) -> list[Process]:
    """Every container of ``workload``'s pod template as a :class:`Process` run at ``placement``.

    ``kind`` is ``Deployment``, ``DaemonSet`` or ``Job``.

    Raises:
        LabError: a value the lab cannot honour (an image without a local command, a missing
            ConfigMap or Secret, a Service selecting nothing, a volume kind it does not mount) —
            naming the object and the field.
    """
    d = _Deriver(cluster, workload, kind, placement)
    spec = workload.get("spec") or {}
    out = []
    ignored = []
    declared = int(spec.get("replicas", 1)) if kind == "Deployment" else 1
    if declared > replicas_cap:
        ignored.append(f"replicas {declared} → {replicas_cap} (one process per Deployment)")
    for key in ("hostPID", "priorityClassName", "tolerations", "terminationGracePeriodSeconds"):
        if key in d.spec:
            ignored.append(f"spec.template.spec.{key}")
    for container in d.spec.get("containers") or []:
        d.subs = []
        d.mounts = {}
        d.files = {}
        d.volumes(container)
        image = IMAGES.get(container.get("image", "").rsplit(":", 1)[0], {"env": {}})
        env = d.env(container, image["env"])
        argv = d.argv(container, env)
        probes = {which: d.probe(which, container[f"{which}Probe"], container, env)
                  for which in ("startup", "readiness", "liveness") if container.get(f"{which}Probe")}
        node = placement.node
        if node is not None:
            argv = _node_flags(argv, d, node, cluster)
        if "KUBECONFIG" not in env and kind != "DaemonSet":
            env["KUBECONFIG"] = placement.directory + "/kubeconfig"
            d.note(f"in-cluster API config ({d.service_account()} token) → KUBECONFIG {env['KUBECONFIG']} "
                   f"(server {cluster.api_url}, the same token)")
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        extra = [f"containers[{container['name']}].{k}" for k in ("resources", "securityContext", "ports")
                 if k in container]
        out.append(Process(name=name, workload=d.where(), container=container["name"], argv=argv, env=env,
                           address=placement.address, directory=placement.directory, files=dict(d.files),
                           probes=probes, substitutions=list(d.subs), ignored=ignored + extra,
                           replicas=min(declared, replicas_cap), run_to_completion=kind == "Job",
                           backoff_limit=int(spec.get("backoffLimit", 6)) if kind == "Job" else 0,
                           node=(node or {}).get("name", "")))
    return out


def _node_flags(argv: list[str], d: _Deriver, node: Mapping[str, Any], cluster: Cluster) -> list[str]:
    """The agent's node-bound flags: cgroup roots under the node's subtree, ``--reserved``
    as the kubelet double reserves (nothing), the node's capacity as the machine, the in-cluster config made explicit, the kubelet's
    URL scheme."""
    out: list[str] = []
    sa_token = f"{d.placement.directory}/mounts{SA_MOUNT}/token"
    for word in argv:
        flag, eq, val = word.partition("=")
        if eq and flag in ("--node-cgroup", "--kube-cgroup-root"):
            local = val[: -len(".slice")] if cluster.kubelet_cgroup_driver == "cgroupfs" and val.endswith(".slice") \
                else val
            new = f"{node['cgroup']}/{local}"
            d.note(f"{flag} {val} → {new} (the node's subtree"
                   + (", cgroupfs naming" if local != val else "") + ")")
            out.append(f"{flag}={new}")
        elif eq and flag == "--kube-cgroup-driver" and val != cluster.kubelet_cgroup_driver:
            d.note(f"{flag} {val} → {cluster.kubelet_cgroup_driver} (the kubelet double's cgroup driver)")
            out.append(f"{flag}={cluster.kubelet_cgroup_driver}")
        elif eq and flag == "--reserved":
            new = "cpu=0m,memory=0"
            d.note(f"--reserved {val} → {new} (it stands for the Node's capacity − allocatable, what the kubelet "
                   "keeps for the system; the kubelet double keeps nothing: allocatable = capacity)")
            out.append(f"--reserved={new}")
            capacity = f"cpu={node['cpu_mcpu']}m,memory={node['memory_bytes']}"
            out.append(f"--capacity={capacity}")
            d.note(f"the machine (/proc) → the node's cgroup: --capacity={capacity}")
        elif word == "--kube-in-cluster":
            out += [f"--kube-api-url={cluster.api_url}", f"--kube-token-file={sa_token}"]
            d.note(f"--kube-in-cluster → --kube-api-url={cluster.api_url} --kube-token-file={sa_token}")
        elif eq and flag == "--kubelet-url" and not val.startswith(cluster.kubelet_scheme + "://"):
            new = cluster.kubelet_scheme + "://" + val.split("://", 1)[1]
            d.note(f"--kubelet-url {val} → {new} (the kubelet double serves {cluster.kubelet_scheme})")
            out.append(f"--kubelet-url={new}")
        else:
            out.append(word)
    for flag in cluster.agent_flags:
        out.append(flag)
        d.note(f"{flag} (the day's time compression: the agent's clock ÷ the speed, floored)")
    return out


def secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's ``data`` (base64) and ``stringData`` decoded."""
    out = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    out.update({k: str(v).encode() for k, v in (secret.get("stringData") or {}).items()})
    return out
