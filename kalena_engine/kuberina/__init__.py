"""Kuberina interop: IR readers, Phase 0 and blueprint verification (docs/design.md §3)."""

from kalena_engine.kuberina.blueprint import load_blueprint, parse_blueprint
from kalena_engine.kuberina.infra import load_infrastructure, parse_infrastructure
from kalena_engine.kuberina.model import (
    Blueprint, DaemonSetSpec, Group, Infrastructure, NodeSpec, PodSpec, Taint, Toleration,
    TopologySpread, Workloads,
)
from kalena_engine.kuberina.phase0 import phase0_capacity
from kalena_engine.kuberina.verify import Verification, Violation, request_ledger, verify_blueprint
from kalena_engine.kuberina.workloads import load_workloads, parse_workloads, unrolled_names

__all__ = [
    "Blueprint", "DaemonSetSpec", "Group", "Infrastructure", "NodeSpec", "PodSpec", "Taint",
    "Toleration", "TopologySpread", "Verification", "Violation", "Workloads", "load_blueprint",
    "load_infrastructure", "load_workloads", "parse_blueprint", "parse_infrastructure",
    "parse_workloads", "phase0_capacity", "request_ledger", "unrolled_names", "verify_blueprint",
]
