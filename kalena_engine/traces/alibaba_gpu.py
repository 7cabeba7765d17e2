"""The Alibaba GPU cluster trace 2023 (``openb_node_list_all_node.csv``,
``openb_pod_list_default.csv``) as a second replay cluster (docs/traces.md, "alibaba-gpu-2023").

As timed the cluster is nearly idle (at most 52 non-BE pods live at once) and most BE pods want
GPUs, which are never reclaimable, so it is mapped thus:

* **nodes**: one per row; allocatable cpu = ``cpu_milli`` [mcpu], ram = ``memory_mib`` [MiB →
  bytes], gpu = ``gpu`` [devices]; other dimensions unconstrained; labels ``gpu-model`` when a
  model is given; no taints, no DaemonSets;
* **production**: every non-BE pod (LS, Burstable, Guaranteed), all standing at once (their
  creation times are ignored), requests cpu_milli / memory_mib / ``num_gpu`` GPU devices
  (``gpu_milli``, a share of one device, is not modelled), placed by first-fit decreasing
  (:func:`kalena_engine.replay.compaction.ffd_blueprint`) — no Kuberina blueprint exists;
* **batch**: every BE pod with a run time (``deletion_time − scheduled_time`` > 0) as one
  single-instance task, in creation order, on a timeline compressed linearly onto one day::

      arrival_s = day_start_s + 86,400 · (creation_time − t_min) / (t_max − t_min)

  (the trace spans ≈ 149 days: ×149 compression of arrivals; run times are kept).
  ``day_start_s`` is 86,400 so the replay's default batch offset starts at the first arrival.

Skipped rows are counted: ``alibaba_gpu.no_run_time`` (BE pod never ran, or deleted before it
was scheduled), ``alibaba_gpu.unparseable_row``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from kalena_engine.errors import TraceError
from kalena_engine.kuberina import Infrastructure, Workloads
from kalena_engine.kuberina.model import NodeSpec, PodSpec
from kalena_engine.resources import CPU, GPU, N_DIMS, RAM, vector
from kalena_engine.traces.batch import BatchTasks

NODE_FILE = "openb_node_list_all_node.csv"
POD_FILE = "openb_pod_list_default.csv"
NODE_HEADER = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_HEADER = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
              "creation_time", "deletion_time", "scheduled_time")
PRODUCTION_QOS = ("LS", "Burstable", "Guaranteed")
DAY_START_S = 86_400.0
MIB = 2**20


def _rows(path: Path, header: tuple[str, ...]) -> list[dict[str, str]]:
    if not path.is_file():
        raise TraceError("file not found", source=str(path), accepted=f"the trace's {path.name}")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != header:
            raise TraceError(f"unexpected header {','.join(reader.fieldnames or ())!r}", source=str(path), line=1,
                             accepted=",".join(header))
        return list(reader)


def _resources(cpu_milli: float, memory_mib: float, gpu: float) -> np.ndarray:
    """An ``(8,)`` request in internal units: mcpu, bytes, GPU devices; the rest 0."""
    return vector(cpu=cpu_milli, ram=memory_mib * MIB, gpu=gpu)


def load_gpu_cluster(directory: str | Path) -> tuple[Infrastructure, Workloads, BatchTasks, dict[str, int]]:
    """Read the trace's two files (module doc for the mapping).

    Returns:
        ``(infrastructure, production workloads, BE batch tasks, anomalies)``.

    Raises:
        TraceError: a file is missing or has another header.
    """
    folder = Path(directory)
    anomalies: dict[str, int] = {}
    nodes = []
    for row in _rows(folder / NODE_FILE, NODE_HEADER):
        allocatable = np.full(N_DIMS, np.inf)
        measured = [CPU, RAM, GPU]
        allocatable[measured] = _resources(float(row["cpu_milli"]), float(row["memory_mib"]), float(row["gpu"]))[measured]
        labels = {"gpu-model": row["model"]} if row["model"] else {}
        nodes.append(NodeSpec(name=row["sn"], zone="openb", rack="openb", labels=labels, taints=(), allocatable=allocatable))
    infra = Infrastructure(source=str(folder / NODE_FILE), nodes=tuple(nodes), daemonsets=())
    pods, batch_rows = [], []
    for row in _rows(folder / POD_FILE, POD_HEADER):
        try:
            request = _resources(float(row["cpu_milli"]), float(row["memory_mib"]), float(row["num_gpu"]))
            created = float(row["creation_time"])
        except ValueError:
            anomalies["alibaba_gpu.unparseable_row"] = anomalies.get("alibaba_gpu.unparseable_row", 0) + 1
            continue
        if row["qos"] in PRODUCTION_QOS:
            pods.append(PodSpec(id=f"openb/{row['name']}", namespace="openb", name=row["name"], declaration=row["name"],
                                replica_index=0, requests=request, labels={"qos": row["qos"]}))
            continue
        run_s = (float(row["deletion_time"]) - float(row["scheduled_time"])
                 if row["deletion_time"] and row["scheduled_time"] else 0.0)
        if run_s <= 0:
            anomalies["alibaba_gpu.no_run_time"] = anomalies.get("alibaba_gpu.no_run_time", 0) + 1
            continue
        batch_rows.append((created, row["name"], run_s, request))
    workloads = Workloads(source=str(folder / POD_FILE), pods=tuple(sorted(pods, key=lambda p: p.id)))
    batch_rows.sort(key=lambda r: (r[0], r[1]))
    created = np.array([r[0] for r in batch_rows], dtype=np.float64)
    span = float(created.max() - created.min()) if len(created) > 1 else 1.0
    arrival = DAY_START_S + 86_400.0 * (created - (created.min() if len(created) else 0.0)) / max(span, 1.0)
    batch = BatchTasks(
        source=str(folder / POD_FILE),
        task_id=np.array([f"openb/{r[1]}" for r in batch_rows], dtype=object),
        job_id=np.array([f"openb/{r[1]}" for r in batch_rows], dtype=object),
        instances=np.ones(len(batch_rows), dtype=np.int64), arrival_s=arrival,
        duration_s=np.array([r[2] for r in batch_rows], dtype=np.float64),
        request=np.array([r[3] for r in batch_rows], dtype=np.float64).reshape(len(batch_rows), N_DIMS),
        priority=np.zeros(len(batch_rows), dtype=np.int64), anomalies=dict(anomalies),
    )
    return infra, workloads, batch, anomalies
