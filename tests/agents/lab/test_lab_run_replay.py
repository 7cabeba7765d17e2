"""The replay of a lab day (kalena_engine.labslice.replay): a rendered slice's own files — its IR,
its batch schedule, its scaled policy — replayed on the simulated clock hold exactly the lab's
nodes, production, series and batch; and the live ÷ replay comparison's gates
(agents.lab.runfigures)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.lab.runfigures import compare, format_table
from agents.lab.slice import SliceConfig, render_slice, resolve_inputs, write_slice
from kalena_engine.errors import InputError
from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads, phase0_capacity
from kalena_engine.labslice.compression import compress, simulated_policy
from kalena_engine.labslice.replay import build_slice_replay, schedule_tasks, slice_replay_inputs
from kalena_engine.policy import Policy
from kalena_engine.traces.bitbrains import load_bitbrains
from kalena_engine.traces.google import production_peak_ratios, read_task_events, read_task_usage

CONFIG = SliceConfig(nodes=2, cpu_m=300, memory_mib=384, speed=20.0, hours=0.5, max_pods_per_node=12,
                     max_batch_pods=30, lab_name="t")


@pytest.fixture(scope="module")
def day(data_dir, tmp_path_factory):
    inputs = resolve_inputs(data_dir, {})
    out = tmp_path_factory.mktemp("slice") / "out"
    write_slice(render_slice(CONFIG, inputs), out)
    workloads = load_workloads(out / "ir/workloads.yaml")
    infra = load_infrastructure(out / "ir/infra.yaml")
    ratios = production_peak_ratios(read_task_events(inputs["google_events"]),
                                    read_task_usage(inputs["google_usage"])).ratios
    compression = compress(Policy(), CONFIG.speed)
    arrivals = json.loads((out / "batch-schedule.json").read_text())["arrivals"]
    summary = json.loads((out / "summary.json").read_text())
    replay_inputs, config = slice_replay_inputs(
        infra=infra, workloads=workloads, blueprint=load_blueprint(out / "ir/blueprint.yaml", workloads),
        bitbrains=load_bitbrains(inputs["usage_dir"]), peak_ratios=ratios, arrivals=arrivals,
        slice_config=summary["config"], policy=simulated_policy(compression))
    return {"out": out, "infra": infra, "workloads": workloads, "arrivals": arrivals, "inputs": replay_inputs,
            "config": config, "replay": build_slice_replay(replay_inputs, config), "compression": compression}


def test_the_replay_holds_the_labs_nodes_production_and_capacities(day) -> None:
    state = day["replay"].simulator.state
    placement = json.loads((day["out"] / "placement.json").read_text())
    assert list(state.node_names) == sorted(placement["nodes"])
    assert np.array_equal(state.capacity, phase0_capacity(day["infra"]))
    assert sorted(state.production.ids) == sorted(placement["pods"])
    # the day's window, on the simulated clock
    assert day["config"].hours == CONFIG.hours and day["config"].step_s == CONFIG.step_s
    assert day["config"].load_factor == 1.0          # the sample is already at its load factor


def test_every_pod_follows_the_series_its_container_follows(day) -> None:
    usage = day["replay"].simulator.usage
    ids = day["replay"].simulator.state.production.ids
    docs = {}
    import yaml
    for doc in yaml.safe_load_all((day["out"] / "kubernetes/production.yaml").read_text()):
        if doc and doc["kind"] in ("Deployment", "StatefulSet", "Pod"):
            meta = doc["metadata"] if doc["kind"] == "Pod" else doc["spec"]["template"]["metadata"]
            docs[(doc["metadata"]["namespace"], (doc["metadata"].get("labels") or {}).get("app"))] = json.loads(
                meta["annotations"]["lab.kalena.naughtian.io/usage"])
    by_id = {p.id: p for p in day["workloads"].pods}
    for step in (0, 7, 29):
        u, _ = usage.clipped_usage_at(step)
        for row, pod_id in enumerate(ids):
            pod = by_id[pod_id]
            assert docs[(pod.namespace, pod.declaration)]["cpu_m"][step] == round(u[row, 0]), (pod_id, step)


def test_the_batch_is_the_schedule_on_the_simulated_clock(day) -> None:
    tasks = day["inputs"].batch
    arrivals = day["arrivals"]
    assert len(tasks) == len(arrivals) and arrivals
    k, offset = CONFIG.speed, CONFIG.batch_offset_s
    for i, a in enumerate(arrivals):
        assert tasks.task_id[i] == a["name"] and tasks.instances[i] == a["pods"]
        assert tasks.arrival_s[i] == pytest.approx(offset + a["at_s"] * k)
        assert tasks.duration_s[i] == pytest.approx(a["duration_s"] * k)          # floored wall duration × k
        assert tasks.request[i, 0] == a["cpu_m"] and tasks.request[i, 1] == a["memory_mib"] * 2**20
    table = day["replay"].simulator.state.tasks
    assert int(table.instances.sum()) == sum(a["pods"] for a in arrivals)


def test_the_replay_runs_the_scaled_policy_on_the_simulated_clock_and_places_the_batch(day) -> None:
    policy = day["config"].policy
    assert policy.estimator.half_life_s == 600 and policy.estimator.stale_min_s == 200   # floor 10 s × 20
    summary = day["replay"].run()
    assert summary["batch_submitted"] == sum(a["pods"] for a in day["arrivals"])
    assert summary["batch_pod_hours"] > 0 and summary["production_evictions"] == 0


def test_a_schedule_row_without_a_key_is_refused_naming_it() -> None:
    with pytest.raises(InputError, match=r"arrivals\[0\]"):
        schedule_tasks([{"at_s": 1.0, "name": "a", "pods": 1, "cpu_m": 5, "memory_mib": 4}], speed=10,
                       batch_offset_s=0.0)
    with pytest.raises(InputError, match="duration_s"):
        schedule_tasks([{"at_s": 1.0, "name": "a", "pods": 1, "cpu_m": 5, "memory_mib": 4, "duration_s": 0}],
                       speed=10, batch_offset_s=0.0)


def test_gates_fail_on_a_production_eviction_or_a_reclaimed_ratio_out_of_band() -> None:
    live = {"reclaimed_fraction_cpu": 0.10, "batch_evictions_per_100_pod_hours": 0.0, "production_evictions": 0}
    replay = {"reclaimed_fraction_cpu": 0.11, "batch_evictions_per_100_pod_hours": 0.0, "production_evictions": 0}
    ok = compare(live, replay)
    assert ok["gates_passed"], ok
    bad = compare({**live, "reclaimed_fraction_cpu": 0.05, "production_evictions": 1}, replay)
    assert set(bad["gates_failed"]) == {"reclaimed_fraction_cpu", "production_evictions"}
    assert "gates FAILED" in format_table(bad) and "reclaimed_fraction_cpu" in format_table(bad)


def test_a_pod_started_before_the_day_is_replayed_from_where_its_container_was(day) -> None:
    from kalena_engine.labslice.replay import series_offsets, with_phases

    usage = day["replay"].simulator.usage
    p = len(usage.vm_of_pod)
    offsets = np.arange(p, dtype=np.int64) % 5
    shifted = with_phases(usage, offsets)
    steps = usage.shapes.shape[0]
    for s in (0, 3, steps - 1):
        expected = np.stack([usage.usage_at((s + int(offsets[i])) % steps)[i] for i in range(p)])
        assert np.allclose(shifted.usage_at(s), expected)
    with pytest.raises(InputError, match="offsets"):
        with_phases(usage, np.zeros(p + 1, dtype=np.int64))
    # two replicas of one template on one node pair with the two live containers in start order
    got = series_offsets(["a-0", "a-1", "b-0"], {"a-0": ("ns", "a"), "a-1": ("ns", "a"), "b-0": ("ns", "b")},
                         {"a-0": "n1", "a-1": "n1", "b-0": "n2"}, {("ns", "a", "n1"): [107.0, 100.0]},
                         day_start_s=113.0, step_wall_s=3.0, steps=4)
    assert got.tolist() == [(13 // 3) % 4, (6 // 3) % 4, 0]
