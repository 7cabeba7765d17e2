"""Image locality on Docker: an engine's image list (tags and sizes) reaches the scheduler, so a
node whose engine holds a batch pod's image scores higher than one that does not and the pod is
placed there (kube-scheduler's ImageLocality weighs a cached image by its size: an image under
23 MB scores nothing, so the image here is 48 MiB).

The private engine is read twice, as two nodes: once while it holds the image (``node-b``) and
once after the image was removed (``node-a``, first by name, so a tie would place the pod there).
Each reading goes through the reconciler as the watcher hands it on; the scores are the
scheduler's own (:func:`kalena_engine.placement.verdict.node_verdicts` on the pass's snapshot).
"""

from __future__ import annotations

import io
import tarfile
import time
import uuid

import numpy as np
import pytest

from agents.orchestrators.docker import Engine, EngineConfig
from agents.orchestrators.fake import FakeOrchestrator
from kalena_engine.placement.verdict import node_verdicts
from kalena_engine.policy import Policy
from kalena_web.control.models import NodeCondition
from kalena_web.control.reconciler import Reconciler
from kalena_web.inventory.models import Cluster
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling import mappers, selectors
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from tests.agents.conftest import docker_socket

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
MIB = 2**20
IMAGE_BYTES = 48 * MIB


def _image_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("data/weights.bin")
        info.size = IMAGE_BYTES
        tar.addfile(info, io.BytesIO(bytes(IMAGE_BYTES)))
    return buffer.getvalue()


@pytest.fixture
def docker_client():
    import docker

    client = docker.DockerClient(base_url=docker_socket(), timeout=60)
    yield client
    client.close()


@pytest.fixture
def large_image(docker_client):
    repository, tag = "kalena/locality", uuid.uuid4().hex[:8]
    docker_client.api.import_image_from_data(_image_tar(), repository=repository, tag=tag)
    name = f"{repository}:{tag}"
    yield name
    try:
        docker_client.images.remove(name, force=True)
    except Exception:  # noqa: BLE001 - the test removed it already
        pass


def test_the_node_whose_engine_holds_the_image_scores_higher_and_takes_the_pod(docker_client, large_image) -> None:
    cluster = Cluster.objects.create(name=f"docker-{uuid.uuid4().hex[:6]}", kind=Cluster.LIVE)
    reconciler = Reconciler(cluster=cluster)
    holder = Engine(EngineConfig(url=docker_socket(), node="node-b")).node_seen(at_s=time.time())
    assert holder.image_bytes[large_image] >= IMAGE_BYTES
    assert holder.image_bytes[f"docker.io/{large_image}"] == holder.image_bytes[large_image]
    docker_client.images.remove(large_image, force=True)
    other = Engine(EngineConfig(url=docker_socket(), node="node-a")).node_seen(at_s=time.time())
    assert large_image not in other.image_bytes
    for seen in (other, holder):
        reconciler.apply(seen)
    assert NodeCondition.objects.get(node__cluster=cluster, node__name="node-b").images[large_image] >= IMAGE_BYTES
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=time.time())

    batch_submit(cluster=cluster, name="batch/train", owner="job/train", request={"cpu": 200, "ram": 32 * MIB},
                 limit={"cpu": 500, "ram": 64 * MIB}, image=large_image, command=["true"], now_s=time.time())
    policy = Policy()
    rows, snapshot = selectors.cluster_snapshot(cluster=cluster, now_s=time.time(),
                                                cooldown_s=policy.eviction.cooldown_s)
    _, sizes = mappers.node_images(rows)
    pending, _ = mappers.pending_batch(selectors.pending_rows(cluster=cluster), sizes)
    verdicts = node_verdicts(snapshot, pending.templates[0], np.asarray(pending.request[0]), policy)
    score = {row.name: float(verdicts.score[i]) for i, row in enumerate(rows)}
    assert verdicts.feasible.all()
    assert score["node-b"] > score["node-a"], score

    orchestrator = FakeOrchestrator(node_names=["node-a", "node-b"])
    report = scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=policy, now_s=time.time(),
                             rng=np.random.default_rng(0))
    assert report.errors == [] and report.placed == 1
    assert BatchPod.objects.select_related("workload__node").get(workload__name="batch/train").workload.node.name \
        == "node-b"
