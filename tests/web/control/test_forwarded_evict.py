"""A console without docker.sock (the Compose and Swarm files): deleting a running batch pod
through the REST API is forwarded to a real Celery worker, which stops the real container on a
private Docker engine, and the request answers only once it did (issue: docker.sock only in the
process that drives the orchestrator)."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from agents.bench.dockerd import PrivateEngines
from agents.orchestrators.docker import DockerOrchestrator, Engine, EngineConfig
from kalena_engine.policy import Policy
from kalena_web.api.services import api_token_create
from kalena_web.cli.benchenv import free_port, wait_celery_ready
from kalena_web.control.reconciler import Reconciler
from kalena_web.control.watching import watch_start
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from tests.web.telemetry.conftest import Services, require_postgres, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[3] / "var"
MIB = 2**20


def test_a_console_without_the_socket_deletes_a_running_pod_through_a_worker(tmp_path: Path) -> None:
    require_postgres()
    tag = uuid.uuid4().hex[:6]
    with PrivateEngines(ROOT / f"fwd-{tag}", ("node-a",), ("0",), memory="256Mi", tag=tag) as pe:
        engine = pe.engines[0]
        cluster = Cluster.objects.create(name=f"fwd-{tag}", kind=Cluster.LIVE)
        orchestrator = DockerOrchestrator([Engine(EngineConfig(url=engine.url, node=engine.node))])
        watch = watch_start(cluster=cluster, orchestrator=orchestrator, reconciler=Reconciler(cluster=cluster))
        services = None
        try:
            wait_until(lambda: Node.objects.filter(cluster=cluster).exists(), what="the engine seen as a node")
            batch_submit(cluster=cluster, name="batch/long", owner="job/long", request={"cpu": 100, "ram": 16 * MIB},
                         limit={"cpu": 200, "ram": 32 * MIB}, image="kalena/busybox:test",
                         command=["sh", "-c", "sleep 600"], now_s=time.time())

            def placed() -> bool:
                LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=time.time())
                scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=Policy(), now_s=time.time(),
                                rng=np.random.default_rng(0))
                return BatchPod.objects.filter(workload__name="batch/long", state=BatchPod.BOUND).exists()

            wait_until(placed, timeout_s=60, what="the pod placed")
            client = engine.client()
            wait_until(lambda: any(c.status == "running" for c in client.containers.list(
                filters={"label": "kalena.naughtian.io/workload=batch/long"})), timeout_s=60, what="its container running")

            user = get_user_model().objects.create_user("op")
            # the operator role's permission (a transactional test's flush drops the roles' groups)
            user.user_permissions.add(Permission.objects.get(content_type__app_label="scheduling",
                                                             codename="operate_batch"))
            token, _ = api_token_create(user=user, name="test")
            # the worker holds the engine; the console is told the engine is somewhere it cannot reach
            services = Services(tmp_path, KALENA_ORCHESTRATOR="docker", KALENA_DOCKER_ENGINES=f"node-a={engine.url}")
            services.procs.worker("worker")
            wait_celery_ready(services.celery(), timeout_s=180)   # a loaded machine starts workers slowly
            console_env = {**services.env, "KALENA_ORCHESTRATOR_THROUGH_WORKERS": "1",
                           "KALENA_FORWARDED_EVICT_TIMEOUT_S": "150",
                           "KALENA_DOCKER_ENGINES": "node-a=unix:///nonexistent/docker.sock"}
            services.procs.env = console_env
            port = free_port()
            services.procs.daphne(port)

            answer = httpx.delete(f"http://127.0.0.1:{port}/api/clusters/{cluster.name}/batch/batch/long",
                                  headers={"Authorization": f"Bearer {token}"}, timeout=200)
            assert answer.status_code == 204, answer.text
            assert BatchPod.objects.get(workload__name="batch/long").state == BatchPod.DELETED
            running = [c for c in client.containers.list(filters={"label": "kalena.naughtian.io/workload=batch/long"})]
            assert running == []                                   # the worker stopped it before the 204
            client.close()
        finally:
            watch.stop()
            if services is not None:
                services.stop()
            for c in engine.client().containers.list(all=True):
                c.remove(force=True)
    shutil.rmtree(pe.root, ignore_errors=True)
