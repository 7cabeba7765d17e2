"""Docker standalone and Docker Swarm: ``client.py`` is the only module that calls an engine."""

from agents.orchestrators.docker.client import DockerOrchestrator, SwarmOrchestrator, container_name

__all__ = ["DockerOrchestrator", "SwarmOrchestrator", "container_name"]
