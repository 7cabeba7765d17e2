"""The Alibaba GPU trace 2023 as a replay cluster: the mapping docs/traces.md states, on the
real files, and a refused file."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from kalena_engine.errors import TraceError
from kalena_engine.replay.compaction import ffd_blueprint
from kalena_engine.resources import CPU, GPU, RAM
from kalena_engine.traces.alibaba_gpu import POD_FILE, load_gpu_cluster


@pytest.fixture(scope="module")
def gpu(traces_dir: Path):
    folder = traces_dir / "alibaba-gpu-2023"
    rows = list(csv.DictReader((folder / POD_FILE).open()))
    return folder, rows, load_gpu_cluster(folder)


def test_nodes_production_and_batch_follow_the_stated_mapping(gpu) -> None:
    _, rows, (infra, workloads, batch, anomalies) = gpu
    assert len(infra.nodes) == 1523
    non_be = [r for r in rows if r["qos"] != "BE"]
    assert len(workloads.pods) == len(non_be)
    be_ran = [r for r in rows if r["qos"] == "BE" and r["deletion_time"] and r["scheduled_time"]
              and float(r["deletion_time"]) > float(r["scheduled_time"])]
    assert len(batch) == len(be_ran)
    assert anomalies["alibaba_gpu.no_run_time"] == sum(r["qos"] == "BE" for r in rows) - len(be_ran)
    first = next(r for r in non_be)
    pod = workloads.pods[workloads.index[f"openb/{first['name']}"]]
    assert pod.requests[CPU] == float(first["cpu_milli"]) and pod.requests[GPU] == float(first["num_gpu"])
    assert pod.requests[RAM] == float(first["memory_mib"]) * 2**20
    # creation order kept on one compressed day starting at the default batch offset
    assert np.all(np.diff(batch.arrival_s) >= 0)
    assert batch.arrival_s.min() == 86_400.0 and batch.arrival_s.max() == 172_800.0
    assert (batch.request[:, GPU] > 0).mean() > 0.5  # most BE pods want GPUs (never reclaimable)


def test_production_is_placed_by_first_fit_within_every_nodes_capacity(gpu) -> None:
    _, _, (infra, workloads, _, _) = gpu
    blueprint = ffd_blueprint(infra, workloads)
    assert len(blueprint.assignment) == len(workloads.pods)
    used = np.zeros_like(infra.allocatable)
    for pod in workloads.pods:
        used[infra.node_index[blueprint.assignment[pod.id]]] += pod.requests
    assert np.all(used <= infra.allocatable + 1e-6)


def test_a_file_with_another_header_is_refused_naming_it(tmp_path: Path, gpu) -> None:
    folder, _, _ = gpu
    (tmp_path / "openb_node_list_all_node.csv").write_text((folder / "openb_node_list_all_node.csv").read_text())
    (tmp_path / POD_FILE).write_text("name,cpu\nx,1\n")
    with pytest.raises(TraceError, match="unexpected header") as err:
        load_gpu_cluster(tmp_path)
    assert POD_FILE in str(err.value)
