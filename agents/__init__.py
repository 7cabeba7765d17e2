"""Kalena agents: node agent and orchestrator adapters (everything that touches a real system)."""
