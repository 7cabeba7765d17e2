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
    assert policy.estimator.half_life_s == 1200 and policy.estimator.stale_min_s == 200  # floor 10 s × 20
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


def test_a_batch_pod_lost_or_bound_twice_after_the_day_fails_its_gate_and_is_named() -> None:
    figures = {"reclaimed_fraction_cpu": 0.10, "batch_evictions_per_100_pod_hours": 0.0, "production_evictions": 0}
    clean = {"counts": {"lost": 0, "double_bound": 0, "production_evictions": 0}, "lost": [], "double_bound": []}
    assert compare({**figures, "invariants": clean}, figures)["gates_passed"]
    lost = {**clean, "counts": {**clean["counts"], "lost": 1}, "lost": [{"pod": "batch/j-1", "state": "bound"}]}
    out = compare({**figures, "invariants": lost}, figures)
    assert out["gates_failed"] == ["batch_pods_lost"]
    assert "batch/j-1" in next(r["explanation"] for r in out["rows"] if r["figure"] == "batch_pods_lost")


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


def test_live_figures_of_a_day_count_reclaimed_capacity_pod_hours_evictions_and_faults(tmp_path) -> None:
    from agents.lab.run import read_faults
    from agents.lab.runfigures import html_report, live_figures

    # one node of C = 100 m / 100 MiB with production requesting 80 m / 50 MiB; at k = 10, steps of
    # 60 s (6 s wall), 10 steps. A batch pod of 40 m / 10 MiB runs the day's first half (30 s wall):
    # X = 80 + 40 − 100 = 20 m over Σq = 120 m for 5 of 10 steps → 20/120 × 0.5; memory never reclaimed.
    (tmp_path / "batch-schedule.json").write_text(json.dumps({"arrivals": [
        {"name": "job-a", "duration_s": 10.0}]}))
    t0 = 1000.0
    day = {"slice_summary": {"config": {"speed": 10.0}}, "play_start_s": t0, "slice_dir": str(tmp_path),
           "console": {"nodes": [{"name": "n1", "blueprint_violations": []}],
                       "batch_pods": [{"name": "batch/job-a-x1", "bound_s": t0, "ended_s": t0 + 30.0,
                                       "outcome": "succeeded", "node": "n1", "request": [40.0, 10 * 2**20]},
                                      # drained by the console's escalation: an eviction the replay counts too
                                      {"name": "batch/job-c", "bound_s": t0 + 20.0, "ended_s": t0 + 24.0,
                                       "outcome": "evicted", "reason": "escalation: eviction_storm", "node": "n1",
                                       "request": [0.0, 0.0]}],
                       "events": [{"ts": t0 + 12.0, "node": "n1", "action": "evict", "reason": "memory_pressure",
                                   "workload": "batch/job-b", "tier": "batch", "trigger_source": "psi-trigger",
                                   "trigger_resource": "memory", "numbers": {"working_set": 1}},
                                  {"ts": t0 + 13.0, "node": "n1", "action": "throttle", "reason": "cpu_budget",
                                   "workload": "batch/job-a-x1", "tier": "batch", "trigger_source": "periodic"},
                                  # the agent's answer to cpu PSI: a PSI event (the source the agent writes)
                                  {"ts": t0 + 14.0, "node": "n1", "action": "cpu_weight", "reason": "cpu_contention",
                                   "workload": "batch/job-a-x1", "tier": "batch", "trigger_source": "psi-trigger"},
                                  # the memory cgroup's eventfd threshold is not PSI
                                  {"ts": t0 + 15.0, "node": "n1", "action": "grace_cut", "reason": "memory_pressure",
                                   "workload": "batch/job-a-x1", "tier": "batch",
                                   "trigger_source": "eventfd-threshold"}]},
           "samples": [], "oom": {"n1": {"kubepods/podx": 2}}}
    live = live_figures(day, node_names=["n1"], capacity=np.array([[100.0, 100 * 2**20]]),
                        prod_request=np.array([[80.0, 50 * 2**20]]), step_s=60.0, steps=10)
    assert live["reclaimed_fraction_cpu"] == pytest.approx(20 / 120 * 0.5, abs=1e-6)
    assert live["reclaimed_fraction_ram"] == 0.0
    assert live["batch_pod_hours"] == pytest.approx((30 + 4) * 10 / 3600, abs=1e-3)    # simulated hours
    assert live["batch_evicted"] == 2 and live["production_evictions"] == 0
    assert live["batch_evicted_by_reason"] == {"escalation": 1, "memory_pressure": 1}
    assert live["batch_evictions_per_100_pod_hours"] == pytest.approx(200 / (340 / 3600), rel=1e-2)
    assert live["psi_events_by_node"] == {"n1": 2} and live["throttle_actions_by_node"] == {"n1": 2}
    assert live["kernel_oom_kills_by_node"] == {"n1": 2}
    assert live["run_time_inflation_p50"] == 3.0 and live["batch_completed"] == 1
    assert [(e["reason"], e["t_s"]) for e in live["why_evicted"]] == [("memory_pressure", 120.0), ("escalation", 240.0)]
    # faults.jsonl onto the timeline (a malformed line is kept, named unreadable)
    (tmp_path / "faults.jsonl").write_text(json.dumps({"kind": "engine-stop", "node": "n1", "started_at": t0 + 20,
                                                       "ended_at": t0 + 26, "recovered": True, "detail": ""})
                                           + "\nnot json\n")
    faults = read_faults(tmp_path)
    assert [f["kind"] for f in faults] == ["engine-stop", "unreadable"]
    # the file outlives a lab: a day reads only the faults since its own lab came up
    assert [f["kind"] for f in read_faults(tmp_path, since_s=t0 + 21)] == ["unreadable"]
    replay = {"timeline": {"time_s": [0.0], "reclaimed_cpu_m_by_node": {"n1": [20.0]}}}
    page = html_report({"lab": "t", "comparison": compare(live, {"reclaimed_fraction_cpu": 0.1}), "live": live,
                        "replay": replay, "faults": faults, "play_start_s": t0, "speed": 10.0, "compression": {}})
    assert "engine-stop" in page and "n1: reclaimed cpu" in page


def test_memory_a_node_holds_outside_its_pods_makes_the_replay_evict_as_the_agents_ledger_does(day) -> None:
    # the agents' ledgers count the memory the node's pods group holds outside every pod's row
    # (`unaccounted`); the replay given it per node evicts where the bare replay does not (150 MiB of a
    # 384 MiB lab node: the shipped memory margin, 1.6 × usage, leaves room for 60 MiB)
    def run(held_mib: float | None):
        replay = build_slice_replay(day["inputs"], day["config"])
        n = len(replay.simulator.state.capacity)
        replay.simulator.unaccounted_ram = None if held_mib is None else np.full(n, held_mib * 2**20)
        records = []
        summary = replay.run(records.append)
        details = [e.detail for r in records for e in r.events if e.kind == "evicted" and e.reason == "priority"]
        return summary, details

    bare, bare_details = run(None)
    held, held_details = run(150.0)
    assert held["batch_evicted"] > bare["batch_evicted"]
    assert held_details and all(d["unaccounted"] == 150 * 2**20 for d in held_details)
    assert all("unaccounted" not in d for d in bare_details)
    assert held["production_evictions"] == 0


def test_a_live_pod_ending_mid_step_holds_its_request_for_the_part_of_the_step_it_ran(tmp_path) -> None:
    from agents.lab.runfigures import live_figures

    # the replay time-weights its batch terms over a step; the live day must too, or every short
    # pod counts whole in each step it touches. C = 100 m, production 80 m; a 40 m pod bound 3 s
    # into the first step (6 s wall) and gone 3 s into the second: 0.5 + 0.5 of a step of 40 m.
    (tmp_path / "batch-schedule.json").write_text(json.dumps({"arrivals": []}))
    t0 = 1000.0
    day = {"slice_summary": {"config": {"speed": 10.0}}, "play_start_s": t0, "slice_dir": str(tmp_path),
           "console": {"nodes": [], "events": [],
                       "batch_pods": [{"name": "batch/b", "bound_s": t0 + 3.0, "ended_s": t0 + 9.0,
                                       "outcome": "succeeded", "node": "n1", "request": [40.0, 0.0]}]},
           "samples": []}
    live = live_figures(day, node_names=["n1"], capacity=np.array([[100.0, 100 * 2**20]]),
                        prod_request=np.array([[80.0, 50 * 2**20]]), step_s=60.0, steps=4)
    # each of the first two steps holds 20 m of batch: 80 + 20 − 100 = 0 reclaimed (counted whole: 20 m)
    assert live["reclaimed_fraction_cpu"] == 0.0
    assert live["timeline"]["reclaimed_cpu_m_by_node"]["n1"] == [0.0, 0.0, 0.0, 0.0]


def test_the_sampler_counts_the_memory_outside_every_pods_row_as_the_agent_does(tmp_path) -> None:
    from agents.lab.run import pod_working_sets, unaccounted_bytes
    from agents.lab.runfigures import median_unaccounted

    mib = 2**20

    def group(rel: str, usage_mib: float, inactive_mib: float = 0.0) -> None:
        d = tmp_path / "kubepods" / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.usage_in_bytes").write_text(f"{int(usage_mib * mib)}\n")
        (d / "memory.stat").write_text(f"cache 0\ntotal_inactive_file {int(inactive_mib * mib)}\n")

    group("", 460, inactive_mib=10)                     # W = 450 MiB
    group("podg", 300)                                  # Guaranteed production pod
    group("burstable/podb", 72, inactive_mib=2)         # W 70
    group("burstable/podds", 3)                         # a DaemonSet pod using 3 MiB of its 2 MiB request
    group("besteffort/not-a-pod", 50)                   # not a pod group: ignored
    total, pods = pod_working_sets(tmp_path / "kubepods")
    assert total == 450 * mib and pods == {"g": 300 * mib, "b": 70 * mib, "ds": 3 * mib}
    assert unaccounted_bytes(total, pods, {"ds": 2.0 * mib}) == (450 - 300 - 70 - 2) * mib
    assert unaccounted_bytes(total, pods, {}) == (450 - 300 - 70 - 3) * mib
    assert pod_working_sets(tmp_path / "missing") is None
    rows = [{"ts": t, "nodes": {"n1": {"unaccounted_bytes": v}, "n2": {"unaccounted_bytes": None}}}
            for t, v in ((1.0, 3.0), (2.0, 5.0), (3.0, 4.0), (9.0, 100.0))]
    assert median_unaccounted(rows, ["n1", "n2"], 0.0, 5.0).tolist() == [4.0, 0.0]   # t = 9 is after the day
    assert median_unaccounted([{"ts": 1.0, "nodes": {"n1": {"cpu": None}}}], ["n1"], 0.0, 5.0) is None


def test_a_saved_day_drops_an_earlier_labs_faults(tmp_path) -> None:
    from agents.lab.run import load_day, save_day

    day = {"slice_dir": str(tmp_path), "console": {}, "state": {"started_s": 100.0},
           "faults": [{"kind": "engine-stop", "started_at": 50.0}, {"kind": "db-restart", "started_at": 150.0},
                      {"kind": "unreadable", "detail": "x"}]}
    save_day(tmp_path / "run-day.json", day)
    assert [f["kind"] for f in load_day(tmp_path / "run-day.json")["faults"]] == ["db-restart", "unreadable"]


def test_the_days_ledger_reads_are_paired_with_the_replays_steps_and_say_where_they_part(day, tmp_path) -> None:
    import sqlite3

    from agents.lab.run import console_ledgers
    from agents.lab.runfigures import ReplayObserver, format_divergence, html_report, ledger_divergence

    # the console's node ledgers, read from its database as the sampler reads them during the day
    db = tmp_path / "kalena.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE inventory_cluster (id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE inventory_node (id INTEGER PRIMARY KEY, name TEXT, cluster_id INTEGER);
            CREATE TABLE ledger_livenodeledger (id INTEGER PRIMARY KEY, node_id INTEGER, capacity TEXT,
                prod_request TEXT, prod_reservation TEXT, batch_request TEXT, usage TEXT, stale INTEGER);
            INSERT INTO inventory_cluster VALUES (1, 'lab'), (2, 'other');
            INSERT INTO inventory_node VALUES (1, 't-1', 1), (2, 't-1', 2);
            INSERT INTO ledger_livenodeledger VALUES
              (1, 1, '[300, 402653184, 0, null, null, null, null, null]', '[100, 1, 0, 0, 0, 0, 0, 0]',
               '[80, 2, 0, 0, 0, 0, 0, 0]', '[150, 3, 0, 0, 0, 0, 0, 0]', '[70, 4, 0, 0, 0, 0, 0, 0]', 0),
              (2, 2, '[1, 1, 0, 0, 0, 0, 0, 0]', '[9, 9, 0, 0, 0, 0, 0, 0]', '[9, 9, 0, 0, 0, 0, 0, 0]',
               '[9, 9, 0, 0, 0, 0, 0, 0]', '[9, 9, 0, 0, 0, 0, 0, 0]', 1);
        """)
    state = {"database": {"url": f"sqlite:///{db}"},
             "processes": [{"name": "kalena-console", "env": {"KALENA_AGENT_TOKENREVIEW_CLUSTER": "lab"}}]}
    assert console_ledgers(state) == {"t-1": {"stale": False, "capacity": [300.0, 402653184.0],
                                              "prod_request": [100.0, 1.0], "prod_reservation": [80.0, 2.0],
                                              "batch_request": [150.0, 3.0], "usage": [70.0, 4.0]}}
    assert console_ledgers({"database": {"url": f"sqlite:///{tmp_path / 'gone' / 'x.sqlite3'}"}}) is None

    # the replay's own ledgers, and live reads of a console that books production 50 m higher on
    # a node 50 m larger (same free room), until half-way, when the first node's production
    # reservation drops by 20 % of the node: its free room parts from the replay's there
    replay = build_slice_replay(day["inputs"], day["config"])
    names = list(replay.simulator.state.node_names)
    observer = ReplayObserver(names)
    replay.run(observer)
    capacity = replay.simulator.state.capacity[:, :2]
    speed, t0 = 20.0, 1000.0
    half = observer.time_s[len(observer.time_s) // 2]
    reads = []
    for k, t_s in enumerate(observer.time_s):
        nodes = {}
        for i, name in enumerate(names):
            prod = observer.prod_reservation[k][i] + [50.0, 0.0]
            if i == 0 and t_s >= half:
                prod[0] -= 0.2 * capacity[0, 0]
            nodes[name] = {"capacity": (capacity[i] + [50.0, 0.0]).tolist(), "prod_reservation": prod.tolist(),
                           "batch_request": observer.batch_request[k][i].tolist(), "usage": [1.0, None]}
        reads.append({"ts": t0 + t_s / speed, "nodes": nodes})
    reads.append({"ts": t0 - 50.0, "nodes": {}})            # before the day: not paired
    divergence = ledger_divergence(reads, observer, t0=t0, speed=speed, capacity=capacity)
    first, second = divergence[names[0]], divergence[names[1]]
    assert first["cpu"]["parted_t_s"] == pytest.approx(half)
    assert first["memory"]["parted_t_s"] is None and second["cpu"]["parted_t_s"] is None
    assert second["cpu"]["live_free_median"] == pytest.approx(second["cpu"]["replay_free_median"])
    assert second["cpu"]["live_prod_reservation_median"] == pytest.approx(
        second["cpu"]["replay_prod_reservation_median"] + 50.0)
    assert first["reads"] == len(observer.time_s) and first["memory"]["live_usage_median"] is None
    # every paired read is kept, so a gap can be looked at step by step (the day's analysis needs them)
    assert set(first["series"]["memory"]["live_usage"]) == {None}
    assert np.median(np.subtract(second["series"]["cpu"]["live_prod_reservation"],
                                 second["series"]["cpu"]["replay_prod_reservation"])) == pytest.approx(50.0)
    assert first["cpu"]["replay_batch_request_median"] == first["cpu"]["live_batch_request_median"]
    text = format_divergence(divergence)
    assert f"{names[0]}: cpu free" in text and "parted at" in text and f"{names[1]}: cpu free" in text
    assert ledger_divergence([], observer, t0=t0, speed=speed, capacity=capacity) is None
    assert "no reads" in format_divergence(None)
    # the report draws each node's ledgers, live against replay
    timeline = {"time_s": [0.0], "reclaimed_cpu_m_by_node": {n: [0.0] for n in names}}
    page = html_report({"lab": "t", "comparison": compare({}, {}), "live": {"timeline": timeline, "why_evicted": []},
                        "replay": {"timeline": timeline}, "speed": speed, "play_start_s": t0, "ledgers": divergence})
    assert f"{names[0]}: cpu the console" in page and "replay free room" in page


def test_a_figure_off_the_side_a_slow_machine_pushes_it_is_not_blamed_on_the_machine() -> None:
    from agents.lab.runfigures import explain

    live = {"host_cpu_psi_some_avg10_mean": 70.0, "run_time_inflation_p50": 1.3, "batch_placed": 157,
            "batch_pod_hours": 13.2}
    replay = {"run_time_inflation_p50": 1.0, "batch_placed": 256, "batch_pod_hours": 18.1}
    # fewer placed: what a slow machine does
    assert "the machine, not the node, was short of cpu" in explain("batch_placed", live, replay)
    # fewer pod-hours: a slow machine gives more, so the ledgers are where to look
    said = explain("batch_pod_hours", live, replay)
    assert "short of cpu" not in said and "0.73× the replay" in said and "ledgers below" in said
    # evictions: where each side evicted, not only that they are rare
    live["batch_evicted"], replay["batch_evicted"] = 6, 4
    live["why_evicted"] = [{"node": "day-2", "count": 1}] * 6
    replay["why_evicted"] = [{"node": "day-1", "count": 1}, {"node": "day-2", "count": 2}, {"node": "day-1", "count": 1}]
    said = explain("batch_evicted", live, replay)
    assert said.startswith("live 6 (day-2 6), replay 4 (day-1 2, day-2 2): evictions are rare events")


def test_the_sensitivity_line_says_whether_live_falls_inside_the_replays_own_spread() -> None:
    from kalena_web.cli.lab_run import format_sensitivity

    spread = {"deltas_mib": [-0.5, -1.0, -2.0, -3.0], "reclaimed_fraction_cpu": [0.216, 0.216, 0.211, 0.223],
              "batch_evictions_per_100_pod_hours": [62.5, 62.5, 74.9, 38.8]}
    live = {"reclaimed_fraction_cpu": 0.227, "batch_evictions_per_100_pod_hours": 65.5}
    replay = {"reclaimed_fraction_cpu": 0.2231, "batch_evictions_per_100_pod_hours": 83.1}
    line = format_sensitivity(spread, live, replay)
    # the unshifted replay (83.1) bounds the range too; live's 65.5 is inside 38.8–83.1, its 0.227 above 0.223;
    # 65.5 ÷ 62.5 and ÷ 74.9 pass the 0.8–1.25 gate, ÷ 83.1 (0.79) and ÷ 38.8 (1.69) do not
    assert "batch evictions per 100 pod-hours 38.8–83.1 (live 65.5: inside; the gate passes against 3 of 5)" in line
    assert "reclaimed cpu 0.211–0.223 (live 0.227: outside; the gate passes against 5 of 5)" in line
    assert "-0.5/-1/-2/-3 MiB" in line and "outside its pods" not in line
    # the node's held memory shifted too: its replays join the range and the count
    spread |= {"unaccounted_deltas_mib": [0.25], "unaccounted": {"reclaimed_fraction_cpu": [0.2],
                                                                  "batch_evictions_per_100_pod_hours": [101.3]}}
    line = format_sensitivity(spread, live, replay)
    assert "every node's memory outside its pods +0.25 MiB" in line
    assert "38.8–101.3 (live 65.5: inside; the gate passes against 3 of 6)" in line


def test_the_replay_holds_memory_as_the_labs_burner_does(day) -> None:
    """The lab's burner holds a figure at most the limit less its overhead, plus its own pages;
    the replay held batch at its request and production at its trace value (memory evictions
    were predicted for a node the live burner kept MiBs lighter)."""
    from kalena_engine.labslice.replay import burner_held_mib, hold_like_burner
    from kalena_engine.resources import RAM

    mib = 2**20
    # the table of the docstring: rounding, the cap ⌊L⌋ − overhead, never below 0
    assert burner_held_mib(np.array([95.6, 40.2, 2.0]), np.array([96, 96, 2]) * mib, 3).tolist() == [93.0, 40.0, 0.0]
    replay = build_slice_replay(day["inputs"], day["config"])
    tasks = replay.simulator.state.tasks
    before_batch = tasks.usage[:, RAM].copy()
    before_prod, _ = replay.simulator.usage.clipped_usage_at(3)
    hold_like_burner(replay, overhead_mib=3, own_bytes=0.7 * mib)
    # batch: request = limit in the lab, so every pod is held 3 − 0.7 = 2.3 MiB under it
    expected = np.minimum(np.maximum(0, np.floor(tasks.limit[:, RAM] / mib) - 3) * mib + 0.7 * mib, tasks.limit[:, RAM])
    np.testing.assert_allclose(tasks.usage[:, RAM], expected)
    assert (tasks.usage[:, RAM] < before_batch).all()
    # production: the trace's figure in whole MiB plus the own pages, cpu untouched
    after_prod, _ = replay.simulator.usage.clipped_usage_at(3)
    limit = replay.simulator.state.production.limit[:, RAM]
    cap = np.maximum(0, np.floor(limit / mib) - 3)
    np.testing.assert_allclose(after_prod[:, RAM], np.minimum(np.minimum(np.round(before_prod[:, RAM] / mib), cap) * mib
                                                              + 0.7 * mib, limit))
    np.testing.assert_array_equal(after_prod[:, 0], before_prod[:, 0])


def test_the_burners_own_pages_are_measured_from_the_days_pod_groups() -> None:
    from agents.lab.runfigures import burner_own_bytes

    mib = 2**20

    def pod(uid: str, figure: int, limit: str | None = None) -> dict:
        annotations = {"lab.kalena.naughtian.io/work": json.dumps({"cpu_m": 10, "memory_mib": figure, "duration_s": 5})}
        if limit:
            annotations["kalena.naughtian.io/resources"] = json.dumps({"containers": {"work": {"limits": {"memory": limit}}}})
        return {"metadata": {"uid": uid, "annotations": annotations}, "spec": {"containers": []}}

    pods = [pod("a", 40), pod("b", 20, limit="64Mi"), {"metadata": {"uid": "prod", "annotations": {}}, "spec": {}}]
    # a: held 37 MiB (40 − 3), reads 37.5, 37.7, 37.9 → 0.7; b: its limit 64 Mi leaves the figure whole, reads 20.9 → 0.9
    samples = [{"ts": t, "nodes": {"n1": {"pod_ws_bytes": {"a": (37 + d) * mib, "prod": 99 * mib}},
                                   "n2": {"pod_ws_bytes": {"b": 20.9 * mib}}}} for t, d in ((1, 0.5), (2, 0.7), (3, 0.9))]
    # after it completed, a's group stays, reading ~0: not a running sample
    samples += [{"ts": t, "nodes": {"n1": {"pod_ws_bytes": {"a": 0.02 * mib}}}} for t in (4, 5, 6, 7)]
    own = burner_own_bytes({"pods": pods, "samples": samples}, 3)
    assert own["pods"] == 2 and own["bytes"] == pytest.approx(0.8 * mib)
    assert burner_own_bytes({"pods": pods, "samples": [{"ts": 1, "nodes": {"n1": {"cpu": None}}}]}, 3) is None


def test_the_working_sets_each_eviction_rule_reads_are_compared_second_by_second() -> None:
    """Live: the node's kubepods working set less each DaemonSet pod's within its request (the
    agent's reading); replay: usage plus the node's held unaccounted memory, at the same
    simulated second; the share of the day each spends at the pressure threshold."""
    from agents.lab.runfigures import ReplayObserver, format_working_sets, working_set_divergence

    mib = 2**20
    observer = ReplayObserver(["n1"])
    for k in range(4):                                   # steps of 60 simulated s; replay usage 350 MiB
        observer.time_s.append(60.0 * k)
        observer.usage.append(np.array([[100.0, 350.0 * mib]]))
    ds = {"metadata": {"uid": "ds", "ownerReferences": [{"kind": "DaemonSet"}]},
          "spec": {"containers": [{"resources": {"requests": {"memory": "2Mi"}}}]}}
    # live W 365 MiB with the DaemonSet's pod using 3 of its 2 MiB: the agent reads 363
    samples = [{"ts": 1000.0 + t, "nodes": {"n1": {"kubepods_ws_bytes": 365.0 * mib,
                                                   "pod_ws_bytes": {"ds": 3.0 * mib, "b": 40.0 * mib}}}}
               for t in range(0, 24)]
    samples.append({"ts": 900.0, "nodes": {"n1": {"kubepods_ws_bytes": 1.0}}})        # before the day
    day = {"slice_summary": {"config": {"speed": 10.0}}, "play_start_s": 1000.0, "pods": [ds], "samples": samples}
    out = working_set_divergence(day, observer, unaccounted=np.array([5.0 * mib]), capacity=np.array([[400.0, 378.0 * mib]]),
                                 threshold_ratio=0.95)["n1"]
    assert out["seconds"] == 24 and out["live_median"] == 363 * mib and out["replay_median"] == 355 * mib
    assert out["live_minus_replay_median"] == 8 * mib
    assert out["live_share_at_threshold"] == 1.0 and out["replay_share_at_threshold"] == 0.0   # 0.95 · 378 = 359.1
    assert len(out["series"]["time_s"]) == 5
    assert "n1: 363.0 vs 355.0 MiB" in format_working_sets({"n1": out}) and "100.0% vs 0.0%" in format_working_sets({"n1": out})
    assert working_set_divergence({**day, "samples": []}, observer, unaccounted=None, capacity=np.array([[1.0, 1.0]]),
                                  threshold_ratio=0.95) is None


def test_the_days_cgroup_metrics_are_printed_beside_the_replays_figure() -> None:
    from agents.lab.runfigures import format_livemetrics

    livemetrics = {"metric4": {"source": "per-thread /proc/<tid>/schedstat (wait > 5 ms …)",
                               "buckets": {"0-20%": {"tiers": {"production": {"share_waiting_over_5ms": 0.52},
                                                               "batch": {"share_waiting_over_5ms": 0.94}}}}},
                   "metric5": {"latency_ms": {"all": {"count": 71, "p50": 3.2, "p99": 40.0}}},
                   "metric7": {"completion_inflation": {"p50": 0.99, "p99": 1.05},
                               "throttled_s_per_pod": {"p50": 6.0, "p99": 97.3}}}
    text = format_livemetrics(livemetrics, {"run_time_inflation_p50": 1.0})
    assert "(per-thread /proc/<tid>/schedstat): 0-20% util: production 52%, batch 94%" in text
    assert "71 actions, p50 3.2 ms, p99 40 ms" in text
    assert "inflation p50 0.99 (replay 1), p99 1.05; throttled time per pod p50 6 s, p99 97.3 s" in text
    assert format_livemetrics(None, {}) == "metrics 4, 5, 7: not collected on this day"
