"""Docker standalone and Docker Swarm: ``client.py`` is the only module that calls an engine;
``labels.py``, ``lifecycle.py`` and ``swarm.py`` are pure (engine JSON ⇄ Kalena types);
``watch.py`` drives the lifecycle from the engines' events."""

from agents.orchestrators.docker.client import DockerOrchestrator, Engine, EngineConfig, SwarmOrchestrator
from agents.orchestrators.docker.labels import container_name

__all__ = ["DockerOrchestrator", "Engine", "EngineConfig", "SwarmOrchestrator", "container_name"]
