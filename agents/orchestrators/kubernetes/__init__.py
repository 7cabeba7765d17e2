"""Kubernetes: ``client.py`` is the only module that calls the API; pure modules beside it turn
API JSON into Kalena's types and decide (how the orchestrator side grows)."""

from agents.orchestrators.kubernetes.client import KubernetesOrchestrator

__all__ = ["KubernetesOrchestrator"]
