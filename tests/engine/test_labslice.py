"""The lab slice's formulas with their worked numbers (kalena_engine.labslice)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.errors import InputError, TraceError
from kalena_engine.labslice import SliceUsage, lab_slack, sample_batch, template_rows
from kalena_engine.labslice.batch import GANG, JOB
from kalena_engine.labslice.production import kind_of
from kalena_engine.traces.batch import BatchTasks


@pytest.mark.parametrize(("name", "pods", "kind"), [
    ("redis-cache", 10, "StatefulSet"),       # "redis", "cache" name state
    ("session-store", 1, "StatefulSet"),      # stateful wins over a single pod
    ("postgres-replica", 9, "StatefulSet"),
    ("api-gateway", 1, "Pod"),                # one pod in the slice, nothing stateful: a bare pod
    ("order-service", 15, "Deployment"),
    ("storefront", 3, "Deployment"),          # whole words only: "storefront" is not "store"
])
def test_the_kind_a_declaration_is_rendered_as(name, pods, kind) -> None:
    assert kind_of(name, pods) == kind


def test_every_replica_follows_its_declarations_first_pod() -> None:
    assert template_rows(["a", "a", "b", "a"]) == [0, 0, 2, 0]


def test_the_lab_slack_is_capacity_left_by_production_usage_over_wall_time() -> None:
    # one node of C = 200 m; two pods using 50 m and 30 m, then 150 m and 90 m (more than C: slack 0);
    # steps of 60 s at k = 10 → 6 s wall: slack 120 m and 0 m → S = 120 · 6 = 720 m·s
    usage = SliceUsage(step_s=60.0, speed=10.0, cpu_m=np.array([[50, 150], [30, 90]]),
                       memory_mib=np.zeros((2, 2), dtype=np.int64), vm_ids=("1", "2"), rho=np.ones((2, 2)),
                       clipped_share=0.0, usage_vms=2)
    slack, total = lab_slack(usage, [0, 0], np.array([200.0]))
    assert slack.tolist() == [[120.0, 0.0]]
    assert total == 720.0


def _one_task(instances=371, cpu_mcpu=1000.0, start=86_500.0, duration=28.0) -> BatchTasks:
    request = np.zeros((1, 8))
    request[0, 0] = cpu_mcpu
    return BatchTasks(source="trace.csv", task_id=np.array(["j_3/R6_3"]), job_id=np.array(["j_3"]),
                      instances=np.array([instances]), arrival_s=np.array([start]), duration_s=np.array([duration]),
                      request=request, priority=np.zeros(1, dtype=np.int64), anomalies={})


def _sample(tasks, **kw):
    args = dict(slack_m_s=10_000.0, load_factor=0.5, speed=10.0, hours=6.0, offset_s=86_400.0, cpu_scale=1 / 256,
                memory_scale=1 / 1024, min_wall_s=5.0, max_pod_cpu_m=62, max_pod_memory_mib=64, max_pods=33, seed=0)
    return sample_batch(tasks, **{**args, **kw})


def test_the_worked_example_of_bundling_and_sampling_to_the_load_factor() -> None:
    # 371 instances of 1 core for 28 s; s_cpu = 1/256 → 3.906 m; 28 s / 10 = 2.8 s → floored to 5 s.
    # T = 0.5 · 10,000 = 5,000 m·s; bundle 8 → 46 pods of round(31.25) = 31 m, 155 m·s each;
    # 32 fit under T: 4,960 m·s → 0.496. Arrival 100 s into the window → 10 s into the run.
    sample = _sample(_one_task())
    (group,) = sample.groups
    assert (sample.bundle, group.instances, group.cpu_m, group.duration_s) == (8, 8, 31, 5.0)
    assert group.pods == 32 and group.arrival_s == pytest.approx(10.0)
    assert sample.demand_m_s == 4_960.0 and sample.measured_load_factor == pytest.approx(0.496)
    assert group.kind in (JOB, GANG) and group.name == "j-3-r6-3"
    assert sample.floored_tasks == 1


def test_demand_below_the_target_repeats_the_window_until_the_load_factor_is_reached() -> None:
    # one instance of 100 m for 600 s: 0.3906 m for 60 s = 23.4 m·s; T = 2 · 10,000 = 20,000 m·s →
    # ⌈20,000 / 23.4⌉ = 854 copies; each a pod of 1 m (the floor) for 60 s = 60 m·s: 332 fit (19,920)
    sample = _sample(_one_task(instances=1, cpu_mcpu=100.0, duration=600.0), load_factor=2.0, max_pods=1000)
    assert sample.copies == 854
    assert sample.pods == 332 and sample.demand_m_s == 19_920.0
    assert sample.measured_load_factor == pytest.approx(2.0, rel=0.005)
    (group,) = sample.groups
    assert group.kind in (JOB, GANG) and group.pods == 332   # several pods of one task: a Job or a gang


@pytest.mark.parametrize(("kw", "field"), [
    ({"load_factor": 0.0}, "--load-factor"),
    ({"min_wall_s": 0.0}, "--min-wall-s"),
    ({"max_pods": 0}, "--max-batch-pods"),
    ({"slack_m_s": 0.0}, "--load-factor"),
])
def test_bad_batch_settings_are_refused_naming_the_flag(kw, field) -> None:
    with pytest.raises(InputError) as err:
        _sample(_one_task(), **kw)
    assert err.value.field == field


def test_a_trace_with_nothing_in_the_window_is_refused_with_its_range() -> None:
    with pytest.raises(TraceError, match="arrive 10,000–10,000 s") as err:
        _sample(_one_task(start=10_000.0))
    assert err.value.source == "trace.csv"
