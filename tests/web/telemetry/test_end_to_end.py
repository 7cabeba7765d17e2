"""End to end on this machine: a real ``kalena-agent run`` measuring real processes in real
cgroups streams to a real Daphne (production settings: PostgreSQL, Redis) with a real Celery
estimation worker, and the node's reservations in the database follow the stream.

And the embedded default end to end: Daphne on SQLite with eager estimation, fed over a real
socket, stores and estimates with no Redis and no worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect

from agents.bench.harness import BURNER, SPINNER
from kalena_engine.estimator import Reservations, apply_samples
from kalena_engine.policy import Policy
from kalena_web.cli.benchenv import free_port
from kalena_web.inventory.models import Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.telemetry.models import AgentStatus, IngestBatch, Sample
from kalena_web.telemetry.services import agent_token_create
from tests.agents.conftest import harness  # noqa: F401 - the real cgroup fixture
from tests.web.telemetry.conftest import hello, record, samples, wait_until

PG, GRAF = "database/postgres-0", "monitoring/grafana-0"


def engine_fold(workload: Workload, rows: list[tuple], imported_s: float) -> Reservations:
    """What the estimator reaches from the stored samples ``(ts, 8 usage, NaN = unmeasured)``."""
    policy = Policy().estimator
    usage = np.array([r[1:] for r in rows], dtype=np.float64)
    pinned = np.zeros((1, 8), dtype=bool)
    pinned[0, 2] = True                                          # gpu: never reclaimed
    q = np.array([workload.request])
    state, _ = apply_samples(
        Reservations(value=q.copy(), updated_s=np.array([imported_s]), last_sample_s=np.array([-np.inf])),
        workload=np.zeros(len(rows), dtype=np.int64), time_s=np.array([r[0] for r in rows]),
        usage=np.nan_to_num(usage, nan=0.0), request=q, limit=np.array([workload.limit]),
        start_s=np.array([-np.inf]), grace_s=np.array([policy.grace_s]), pinned=pinned, policy=policy,
        unmeasured=np.isnan(usage))
    return state


@pytest.mark.cgroup
def test_a_real_agent_streams_to_daphne_and_the_reservations_follow(home, beta, services, harness,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    imported_s = WorkloadReservation.objects.values_list("updated_s", flat=True).first()
    token = tmp_path / "token"
    token.write_text(agent_token_create(node=beta)[0] + "\n")
    # the burner's group gets the largest cpu weight v1 allows (cpu.shares 262144, at both levels), so on
    # a machine loaded by other work it still gets about one core whenever it competes for a cpu — what it
    # measures is its demand, not what is left over
    harness.create("", cpu_shares=262144)
    harness.create("pg", cpu_shares=262144)
    harness.create("graf", cpu_shares=2)
    harness.spawn("pg", BURNER)                 # postgres-0 busy: one core, above its 0.5-core request
    harness.spawn("graf", SPINNER)              # grafana-0 idle
    workloads = tmp_path / "w.json"
    workloads.write_text(json.dumps({"workloads": [
        {"id": PG, "cgroup": harness.rel("pg"), "labels": {"kalena.naughtian.io/tier": "service"},
         "requests": {"cpu": "500m", "memory": "1Gi"}},
        {"id": GRAF, "cgroup": harness.rel("graf"), "labels": {"kalena.naughtian.io/tier": "service"},
         "requests": {"cpu": "200m", "memory": "256Mi"}}]}))
    port = free_port()
    services.procs.daphne(port)
    services.procs.worker("estimation")
    agent = subprocess.Popen(
        [sys.executable, "-m", "agents.cli", "run", "--node-name", beta.name, "--workloads-file", str(workloads),
         "--capacity", "cpu=4,memory=16Gi", "--node-cgroup", harness.rel(""), "--sampling-interval-s", "1",
         "--link-url", f"ws://127.0.0.1:{port}/agent/v1/ws", "--link-token-file", str(token),
         "--state-dir", str(tmp_path / "state"), "--dry-run"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def streamed() -> bool:
            counts = {n: Sample.objects.filter(workload__name=n).count() for n in (PG, GRAF)}
            return min(counts.values()) >= 5 and not IngestBatch.objects.filter(estimation_run__isnull=True).exists()
        wait_until(streamed, timeout_s=90, what="five estimated samples of each workload")
        ledger = LiveNodeLedger.objects.get(node=beta)
        assert ledger.stale is False and time.time() - ledger.last_sample_s < 10
    finally:
        agent.send_signal(signal.SIGTERM)
        output = agent.communicate(timeout=30)[0]
    assert agent.returncode == 0, output
    wait_until(lambda: not IngestBatch.objects.filter(estimation_run__isnull=True).exists(), timeout_s=30,
               what="the last batches to be estimated")

    usage_cols = ("cpu_mcpu", "ram_bytes", "gpu_devices", "storage_bytes", "disk_read_bps", "disk_write_bps",
                  "net_in_bps", "net_out_bps")
    reservations = {}
    for name in (PG, GRAF):
        w = Workload.objects.get(cluster=home, name=name)
        rows = [tuple(np.nan if v is None else v for v in row) for row in
                Sample.objects.filter(workload=w).order_by("ts").values_list("ts", *usage_cols)]
        stored = WorkloadReservation.objects.get(workload=w)
        expected = engine_fold(w, rows, imported_s)
        np.testing.assert_allclose(stored.value, expected.value[0], rtol=1e-9)   # the stream, folded
        assert stored.last_sample_s == rows[-1][0]
        reservations[name] = (np.asarray(stored.value), np.asarray(w.request), rows)
    pg, graf = reservations[PG], reservations[GRAF]
    pg_cpu = np.array([r[1] for r in pg[2]], dtype=np.float64)
    pg_cpu = pg_cpu[np.isfinite(pg_cpu)]                          # the first reading has no rate yet
    # the burner really used more than its 0.5-core request in most samples (μ·u ≥ L = 0.5 core needs
    # u ≥ 435 mcpu; the median is robust to a sample or two the machine's load squeezed) …
    assert np.median(pg_cpu) > 600, pg_cpu.tolist()
    assert pg[0][0] == pytest.approx(pg[1][0])                   # … so r_cpu stays at its limit (= request)
    assert graf[0][0] < graf[1][0] and np.nanmax([r[1] for r in graf[2]]) < 50   # idle grafana: decaying (h = 600 s)
    assert AgentStatus.objects.get(node=beta).accepted_samples == Sample.objects.filter(node=beta).count()


def test_embedded_default_sqlite_eager_estimation_end_to_end(kuberina_dir: Path, tmp_path: Path) -> None:
    """No DATABASE_URL, no REDIS_URL: Daphne on SQLite stores and estimates in process."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(KALENA_DB_PATH=str(tmp_path / "k.sqlite3"), KALENA_VAR_DIR=str(tmp_path), KALENA_LOG_LEVEL="WARNING")
    bp = tmp_path / "bp.yaml"
    nodes = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
    from kalena_engine.kuberina import load_workloads

    pods = [p.id for p in load_workloads(kuberina_dir / "homelab/homelab_workloads.yaml").pods]
    assignment = {p: nodes[i % 3] for i, p in enumerate(pods)}
    assignment["smart-home/home-assistant-0"] = assignment["smart-home/zigbee2mqtt-0"] = "thinkcentre-beta"
    bp.write_text("solution:\n" + "".join(f"  {p}: {n}\n" for p, n in assignment.items()))

    def kalena(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-m", "kalena_web.cli", *argv], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], env=env, check=True, timeout=120,
                   cwd=Path(__file__).resolve().parents[3])
    kalena("cluster", "import", "home", "--infra", str(kuberina_dir / "homelab/homelab_infra.yaml"),
           "--workloads", str(kuberina_dir / "homelab/homelab_workloads.yaml"), "--blueprint", str(bp))
    token = kalena("agent-token", "create", "home", "thinkcentre-beta").splitlines()[1]
    port = free_port()
    daphne = subprocess.Popen([str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                               "kalena_web.asgi:application"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        from kalena_web.cli.benchenv import wait_port

        wait_port(port, proc=daphne)

        async def agent() -> dict:
            async with connect(f"ws://127.0.0.1:{port}/agent/v1/ws",
                               additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                await ws.send(json.dumps(hello("thinkcentre-beta")))
                assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "welcome"
                now = time.time()
                await ws.send(json.dumps(samples("thinkcentre-beta", 1, [record(PG, now - 1, cpu_mcpu=50.0),
                                                                        record("nope/x", now - 1)])))
                return json.loads(await asyncio.wait_for(ws.recv(), 30))

        ack = asyncio.run(agent())
    finally:
        os.killpg(daphne.pid, signal.SIGTERM)
        daphne.wait(30)
    assert ack["accepted"] == 1 and ack["rejected"] == {"unknown_workload": 1}
    db = sqlite3.connect(tmp_path / "k.sqlite3")
    (stored,) = db.execute("SELECT count(*) FROM telemetry_sample").fetchone()
    (pending,) = db.execute("SELECT count(*) FROM telemetry_ingestbatch WHERE estimation_run IS NULL").fetchone()
    value, last, request = db.execute(
        "SELECT r.value, r.last_sample_s, w.request FROM ledger_workloadreservation r JOIN "
        "inventory_workload w ON w.id = r.workload_id WHERE w.name = ?", [PG]).fetchone()
    (stale,) = db.execute("SELECT l.stale FROM ledger_livenodeledger l JOIN inventory_node n ON n.id = l.node_id "
                          "WHERE n.name = 'thinkcentre-beta'").fetchone()
    assert (stored, pending, stale) == (1, 0, 0)
    # estimated in process: the 50-mcpu sample started r_cpu's decay below the request
    assert last is not None and 57.5 < json.loads(value)[0] < json.loads(request)[0]
