"""Inventory: clusters, nodes and workloads (production pods and batch tasks)."""
