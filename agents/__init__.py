"""Kalena agents: node agent and orchestrator adapters (everything that touches a real system)."""

__version__ = "0.1.0"
