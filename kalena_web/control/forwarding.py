"""The orchestrator port as the internet-facing console sees it when it holds no orchestrator
credentials (``KALENA_ORCHESTRATOR_THROUGH_WORKERS=1``, the Compose and Swarm files): the only
call a console request makes — stopping a pod it deletes — is forwarded to a Celery worker, the
process that mounts ``docker.sock`` (or holds the Kubernetes service account), and the request
waits for the worker's answer, so the REST and CLI semantics stay the same (204 once stopped;
refused → nothing changes).

The answer travels through the cache (Redis in production; the process-local cache when tasks
run eagerly in the embedded default) under a one-time key; a worker that does not answer within
``timeout_s`` is reported as a refusal, and the delete changes nothing.
"""

from __future__ import annotations

import time
import uuid

from django.core.cache import cache

from agents.orchestrators import OrchestratorError
from agents.orchestrators.base import WorkloadGone
from kalena_web.inventory.models import Cluster

REPLY_TTL_S = 300


class ThroughWorkers:
    """Forwards ``evict`` to the ``kalena.control.evict`` task; every other call of the port is
    refused (the console never binds or watches)."""

    def __init__(self, cluster: Cluster, *, timeout_s: float, poll_s: float = 0.2) -> None:
        self.cluster, self.timeout_s, self.poll_s = cluster, timeout_s, poll_s

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        """Raises: WorkloadGone (nothing to stop), OrchestratorError (refused, or no worker
        answered within ``timeout_s``)."""
        from kalena_web.control.tasks import evict_forwarded

        key = f"kalena:forwarded-evict:{uuid.uuid4().hex}"
        evict_forwarded.delay(cluster_id=self.cluster.id, workload_id=workload_id, grace_s=grace_s, reason=reason,
                              reply_key=key)
        deadline = time.monotonic() + self.timeout_s
        while (answer := cache.get(key)) is None:
            if time.monotonic() >= deadline:
                raise OrchestratorError(f"evict {workload_id}: no worker answered within {self.timeout_s:g} s "
                                        "(KALENA_ORCHESTRATOR_THROUGH_WORKERS: are the Celery workers running?)")
            time.sleep(self.poll_s)
        cache.delete(key)
        if answer["outcome"] == "gone":
            raise WorkloadGone(answer["message"])
        if answer["outcome"] == "refused":
            raise OrchestratorError(answer["message"])

    def __getattr__(self, name: str):
        raise OrchestratorError(f"{name}: the console forwards only evictions to the workers "
                                "(KALENA_ORCHESTRATOR_THROUGH_WORKERS)")


def evict_and_reply(*, cluster: Cluster, workload_id: str, grace_s: float, reason: str, reply_key: str,
                    orchestrator) -> str:
    """The worker's side: evict through the real adapter, then publish the outcome under
    ``reply_key``; returns it (``stopped`` | ``gone`` | ``refused``)."""
    try:
        orchestrator.evict(workload_id, grace_s=grace_s, reason=reason)
        answer = {"outcome": "stopped", "message": ""}
    except WorkloadGone as exc:
        answer = {"outcome": "gone", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any failure is the console's refusal, by message
        answer = {"outcome": "refused", "message": str(exc)}
    cache.set(reply_key, answer, timeout=REPLY_TTL_S)
    return answer["outcome"]
