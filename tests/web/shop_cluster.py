"""A small live cluster for production identity (docs/design.md §15): two nodes, a Deployment-style
declaration ``web`` (3 replicas), a StatefulSet-style ``db`` (2) and ``cache`` (1), and a
DaemonSet in Phase 0. kube-a holds web-0000, web-0001, db-0000 and cache-0: 6 + 6 + 12 + 18 = 42
cores of production requests; kube-b holds web-0002 and db-0001: 6 + 12 = 18 cores."""

from __future__ import annotations

from pathlib import Path

from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
from kalena_web.control.services import live_cluster_import

INFRA = """
nodes:
  - {name: kube-a, zone: z1, rack: r1, labels: {}, taints: [], allocatable: {cpu: 64, ram: 256Gi}}
  - {name: kube-b, zone: z1, rack: r2, labels: {}, taints: [], allocatable: {cpu: 64, ram: 256Gi}}
daemonsets:
  - {name: fluentd, resources: {cpu: 0.5, ram: 512Mi}, nodeSelector: {}, tolerations: []}
"""
WORKLOADS = """
namespaces:
  shop:
    - {name: web, replicas: 3, requests: {cpu: 6, ram: 4Gi}}
    - {name: db, replicas: 2, requests: {cpu: 12, ram: 16Gi}}
    - {name: cache, replicas: 1, requests: {cpu: 18, ram: 8Gi}}
"""
BLUEPRINT = """
solution:
  shop/web-0000: kube-a
  shop/web-0001: kube-a
  shop/web-0002: kube-b
  shop/db-0000: kube-a
  shop/db-0001: kube-b
  shop/cache-0: kube-a
"""


def import_shop(tmp_path: Path, *, now_s: float):
    """The cluster ``shop`` imported live (every reservation at its request)."""
    for name, text in (("infra", INFRA), ("workloads", WORKLOADS), ("blueprint", BLUEPRINT)):
        (tmp_path / f"{name}.yaml").write_text(text)
    workloads = load_workloads(tmp_path / "workloads.yaml")
    return live_cluster_import(name="shop", infra=load_infrastructure(tmp_path / "infra.yaml"), workloads=workloads,
                               blueprint=load_blueprint(tmp_path / "blueprint.yaml", workloads), now_s=now_s).cluster
