"""Objects as a kubelet and the controllers write them, for the test API server and its tests:
:func:`node` (a registered Node) and :func:`pod` (a Pod of a controller, bound or pending). Both
return plain API JSON (dicts) to create through the server."""

from __future__ import annotations

from agents.orchestrators.kubernetes.teststore import now_rfc3339

__all__ = ["node", "pod"]


def node(name: str, *, cpu: str = "16", memory: str = "64Gi", ready: bool = True, unschedulable: bool = False,
         labels: dict | None = None, taints: list | None = None, images: list | None = None,
         address: str = "") -> dict:
    """A core/v1 Node as a kubelet registers it (API reference: cluster-resources/node-v1);
    ``address`` is its ``InternalIP`` (with a ``Hostname`` address) when given."""
    addresses = [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}] if address else []
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": ({"unschedulable": True} if unschedulable else {}) | ({"taints": taints} if taints else {}),
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"},
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339(),
                            "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "message": "kubelet is posting ready status" if ready else "container runtime down"}],
            "images": images or [],
            **({"addresses": addresses} if addresses else {}),
            "nodeInfo": {"kubeletVersion": "v1.31.0", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "bootID": f"boot-{name}", "machineID": f"machine-{name}",
                         "systemUUID": f"uuid-{name}", "kernelVersion": "6.8.0", "osImage": "Ubuntu 24.04 LTS",
                         "containerRuntimeVersion": "containerd://1.7.20"},
        },
    }


def pod(namespace: str, name: str, node_name: str = "", *, tier: str | None = None, priority: str | None = None,
        owner_kind: str = "ReplicaSet", owner_name: str = "owner", phase: str = "Running", cpu: str = "500m",
        memory: str = "1Gi", limit_cpu: str = "1", limit_memory: str = "1Gi", labels: dict | None = None,
        image: str = "busybox:1.36", grace_s: int = 30, scheduler: str | None = None) -> dict:
    """A core/v1 Pod (API reference: workload-resources/pod-v1); ``tier="batch"`` sets
    ``schedulerName: kalena``; no ``node_name`` → phase Pending."""
    all_labels = {"app": name.rsplit("-", 1)[0], **(labels or {})}
    if tier:
        all_labels["kalena.naughtian.io/tier"] = tier
    annotations = {"kalena.naughtian.io/priority": priority} if priority is not None else {}
    spec = {"containers": [{"name": "main", "image": image,
                            "resources": {"requests": {"cpu": cpu, "memory": memory},
                                          "limits": {"cpu": limit_cpu, "memory": limit_memory}}}],
            "schedulerName": scheduler or ("kalena" if tier == "batch" else "default-scheduler"),
            "terminationGracePeriodSeconds": grace_s, "restartPolicy": "Never" if tier == "batch" else "Always"}
    if node_name:
        spec["nodeName"] = node_name
    meta = {"name": name, "namespace": namespace, "labels": all_labels, "annotations": annotations}
    if owner_kind:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1" if owner_kind == "Job" else "apps/v1", "kind": owner_kind,
                                    "name": owner_name, "uid": f"uid-{owner_name}", "controller": True,
                                    "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase if node_name else "Pending"}}
