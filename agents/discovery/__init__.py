"""Workload discovery: which workloads run on this node, their tier, priority, requests,
limits and cgroup (workloads file, Docker labels, kubelet pods). Discovery only reads."""

from agents.discovery.base import Discovery, WorkloadSource

__all__ = ["Discovery", "WorkloadSource"]
