"""The lab's slice of the real Irina cluster: what ``kalena lab slice`` writes is a cluster the
lab can hold (fits, keeps the blueprint's shares), Kubernetes accepts (Debian's kubectl against
the test API server, whose controller doubles name the pods), the console imports and maps by
production identity, with usage series and batch load as stated."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from agents.lab.slice import (
    DEFAULT_INPUTS, USAGE_ANNOTATION, WORK_ANNOTATION, SliceConfig, render_slice, resolve_inputs, write_slice,
)
from agents.orchestrators.events import ProductionSeen
from agents.orchestrators.kubernetes.objects import pod_events
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node
from kalena_engine.errors import InputError
from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads, phase0_capacity
from kalena_engine.kuberina.identity import DAEMONSET, MAPPED, BlueprintEntries, LivePod, production_identity
from kalena_engine.labslice import (
    LabShape, replay_by_template, sample_batch, slice_production, slice_usage, template_rows,
)
from kalena_engine.replay import ReplayConfig, ReplayInputs
from kalena_engine.replay.setup import build_replay
from kalena_engine.traces.alibaba import read_batch_task
from kalena_engine.traces.bitbrains import BitbrainsSet, VMSeries, load_bitbrains
from kalena_engine.traces.google import production_peak_ratios, read_task_events, read_task_usage

ROOT = Path(__file__).resolve().parents[3]
KUBECTL = ROOT / "var" / "tools" / "kubernetes-client" / "usr" / "bin" / "kubectl"
CONFIG = SliceConfig()   # 4 × 250 m / 256 MiB, k = 10, seed 0, load factor 1


@pytest.fixture(scope="module")
def inputs(data_dir):
    return resolve_inputs(data_dir, {})


@pytest.fixture(scope="module")
def rendered(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("slice") / "out"
    result = render_slice(CONFIG, inputs)
    write_slice(result, out)
    return result, out


def _docs(out: Path, rel: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((out / rel).read_text()) if d]


def _mib(q: str) -> int:
    assert q.endswith("Mi"), q
    return int(q[:-2])


def _m(q: str) -> int:
    assert q.endswith("m"), q
    return int(q[:-1])


def test_production_requests_fit_the_lab_nodes_and_keep_each_pods_share_of_its_node(rendered) -> None:
    result, out = rendered
    docs = _docs(out, "kubernetes/production.yaml")
    placement = json.loads((out / "placement.json").read_text())
    used = {n: [0, 0] for n in placement["nodes"]}
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    for ds in daemonsets:
        req = ds["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        for n in used:
            used[n][0] += _m(req["cpu"])
            used[n][1] += _mib(req["memory"])
    source = {(w["namespace"], w["name"]): w for w in placement["workloads"]}
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet", "Pod"):
            continue
        spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
        req = spec["containers"][0]["resources"]["requests"]
        w = source[(doc["metadata"]["namespace"], doc["metadata"]["labels"]["app"])]
        for n, count in w["nodes"].items():
            used[n][0] += count * _m(req["cpu"])
            used[n][1] += count * _mib(req["memory"])
    for n, (cpu, mem) in used.items():
        assert cpu <= CONFIG.cpu_m and mem <= CONFIG.memory_mib, (n, cpu, mem)
    # shares: a 64-core / 256 GiB Irina node onto 250 m / 256 MiB — each pod keeps its share within
    # the rounding (1 m, 1 MiB)
    prod = result.production
    assert prod.source_allocatable_mcpu == 64_000 and prod.source_allocatable_bytes == 256 * 2**30
    for d in prod.declarations:
        assert abs(d.cpu_m / CONFIG.cpu_m - d.source_cpu_m / 64_000) <= 1 / CONFIG.cpu_m
        assert abs(d.memory_mib / CONFIG.memory_mib - d.source_ram_bytes / (256 * 2**30)) <= 1 / CONFIG.memory_mib
    # and each blueprint node's requested share survives: e.g. std nodes ~95 % cpu stay ~95 %
    by_source = Counter()
    for p in prod.pods:
        by_source[p.node] += prod.declaration_of(p).source_cpu_m
    for lab, _ in prod.node_map:
        ds_src = sum(ds.source_cpu_m for ds in prod.daemonsets)
        share = (by_source[lab] + ds_src) / 64_000
        assert abs(used[lab][0] / CONFIG.cpu_m - share) <= 0.08, (lab, used[lab][0], share)


def test_every_workload_kind_appears_with_the_contracts_the_kubelet_double_reads(rendered) -> None:
    _, out = rendered
    docs = _docs(out, "kubernetes/production.yaml")
    kinds = Counter(d["kind"] for d in docs)
    assert {"Namespace", "DaemonSet", "Deployment", "StatefulSet", "Pod", "Service"} <= set(kinds)
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Pod"):
            meta = d["metadata"] if d["kind"] == "Pod" else d["spec"]["template"]["metadata"]
            usage = json.loads(meta["annotations"][USAGE_ANNOTATION])
            assert set(usage) == {"step_s", "cpu_m", "memory_mib", "repeat"} and usage["repeat"] is True
            assert usage["step_s"] == pytest.approx(60 / 10)
            assert all(isinstance(v, int) and v >= 0 for v in usage["cpu_m"] + usage["memory_mib"])
    schedule = json.loads((out / "batch-schedule.json").read_text())["arrivals"]
    batch_kinds = Counter(a["kind"] for a in schedule)
    assert {"Job", "Gang", "Pod"} <= set(batch_kinds)
    assert [a["at_s"] for a in schedule] == sorted(a["at_s"] for a in schedule)
    for a in schedule[:40]:
        (doc,) = _docs(out, a["file"])
        meta = doc["metadata"] if doc["kind"] == "Pod" else doc["spec"]["template"]["metadata"]
        assert meta["labels"]["kalena.naughtian.io/tier"] == "batch"
        work = json.loads(meta["annotations"][WORK_ANNOTATION])
        assert work == {"cpu_m": a["cpu_m"], "memory_mib": a["memory_mib"], "duration_s": a["duration_s"]}
        if a["kind"] == "Gang":
            assert meta["annotations"]["kalena.naughtian.io/gang"] == a["name"]
            assert meta["annotations"]["kalena.naughtian.io/min-member"] == str(a["pods"])
            assert doc["spec"]["parallelism"] == doc["spec"]["completions"] == a["pods"] >= 2
        # time compression: arrival and duration divided by k, duration floored at the wall minimum
        assert a["at_s"] == pytest.approx((a["trace_arrival_s"] - CONFIG.batch_offset_s) / CONFIG.speed, abs=1e-3)
        assert a["duration_s"] == pytest.approx(max(CONFIG.min_wall_s, a["trace_duration_s"] / CONFIG.speed))


@pytest.mark.parametrize("load_factor", [0.5, 1.0, 2.0])
def test_batch_demand_over_the_slack_measured_from_the_files_matches_the_load_factor(rendered, inputs,
                                                                                     load_factor) -> None:
    result, out = rendered
    # slack measured from what was written: each node's post-Phase-0 capacity minus the usage the
    # production containers will follow, step by step
    docs = _docs(out, "kubernetes/production.yaml")
    placement = json.loads((out / "placement.json").read_text())
    ds_cpu = sum(_m(d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"])
                 for d in docs if d["kind"] == "DaemonSet")
    series = {}
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet"):
            series[(d["metadata"]["namespace"], d["metadata"]["name"])] = json.loads(
                d["spec"]["template"]["metadata"]["annotations"][USAGE_ANNOTATION])
        elif d["kind"] == "Pod":
            series[(d["metadata"]["namespace"], d["metadata"]["labels"]["app"])] = json.loads(
                d["metadata"]["annotations"][USAGE_ANNOTATION])
    steps = len(next(iter(series.values()))["cpu_m"])
    prod_use = {n: np.zeros(steps) for n in placement["nodes"]}
    for w in placement["workloads"]:
        for n, count in w["nodes"].items():
            prod_use[n] += count * np.array(series[(w["namespace"], w["name"])]["cpu_m"])
    step_wall = CONFIG.step_s / CONFIG.speed
    slack = sum(np.maximum(0, CONFIG.cpu_m - ds_cpu - use).sum() * step_wall for use in prod_use.values())
    if load_factor == CONFIG.load_factor:
        arrivals = json.loads((out / "batch-schedule.json").read_text())["arrivals"]
    else:
        sample = sample_batch(read_batch_task(inputs["batch_trace"]), slack_m_s=slack, load_factor=load_factor,
                              speed=CONFIG.speed, hours=CONFIG.hours, offset_s=CONFIG.batch_offset_s,
                              cpu_scale=result.production.cpu_scale, memory_scale=result.production.memory_scale,
                              min_wall_s=CONFIG.min_wall_s, max_pod_cpu_m=62, max_pod_memory_mib=64, max_pods=300,
                              seed=0)
        arrivals = [{"pods": g.pods, "cpu_m": g.cpu_m, "duration_s": g.duration_s} for g in sample.groups]
    demand = sum(a["pods"] * a["cpu_m"] * a["duration_s"] for a in arrivals)
    assert demand / slack == pytest.approx(load_factor, rel=0.02)


@pytest.mark.parametrize(("speed", "step_wall_s"), [(10, 6.0), (60, 1.0), (1, 60.0)])
def test_usage_series_are_the_peak_mapping_scaled_to_the_pod_and_compressed_in_time(speed, step_wall_s) -> None:
    # one VM sampled every 300 s for 1 h: cpu ratio 0.1, 0.2, 0.05, 0.2 … (p99 over the window 0.2),
    # memory ratio 0.5 throughout (p99 0.5); a pod of q = 16 m / 10 MiB with ρ = (0.5, 0.8):
    #   cpu  u = 0.5 · 16 · s / 0.2 → 4 m at 0.1, 8 m at 0.2, 2 m at 0.05
    #   ram  u = 0.8 · 10 MiB · 0.5 / 0.5 = 8 MiB
    # 60 steps of 60 s: at k = 10 a step of 6 s wall (6 minutes a pass), at k = 60 1 s, at k = 1 60 s.
    t = np.arange(13, dtype=np.int64) * 300 + 1_000_000
    cpu = np.array([0.1, 0.2, 0.05, 0.2] * 3 + [0.1])
    vm = VMSeries("7", t, np.full(13, 1000.0), cpu * 1000.0, np.full(13, 4096.0), np.full(13, 2048.0),
                  *(np.zeros(13) for _ in range(4)), rows_read=13, anomalies={})
    request = np.zeros((1, 8))
    request[0, 0], request[0, 1] = 16.0, 10 * 2**20
    usage = slice_usage(request, BitbrainsSet("vms", (vm,), {}), np.array([[0.5, 0.8]]), hours=1, step_s=60, seed=0,
                        speed=speed)
    assert usage.step_wall_s == step_wall_s and usage.wall_s == 60 * step_wall_s
    expected_cpu = np.repeat([4, 8, 2, 8] * 3, 5)
    assert usage.cpu_m[0].tolist() == expected_cpu.tolist()
    assert set(usage.memory_mib[0].tolist()) == {8}
    assert usage.vm_ids == ("7",)


def test_the_replay_of_the_slice_drives_every_pod_with_the_series_its_container_follows(rendered, inputs) -> None:
    _, out = rendered
    infra = load_infrastructure(out / "ir/infra.yaml")
    workloads = load_workloads(out / "ir/workloads.yaml")
    blueprint = load_blueprint(out / "ir/blueprint.yaml", workloads)
    events = read_task_events(inputs["google_events"])
    ratios = production_peak_ratios(events, read_task_usage(inputs["google_usage"])).ratios
    replay = build_replay(ReplayInputs(infra=infra, workloads=workloads, blueprint=blueprint,
                                       bitbrains=load_bitbrains(inputs["usage_dir"]),
                                       batch=read_batch_task(inputs["batch_trace"]), peak_ratios=ratios),
                          ReplayConfig(hours=CONFIG.hours, step_s=CONFIG.step_s, seed=CONFIG.seed))
    per_pod = replay.simulator.usage
    # the replay's own draw for each declaration's first pod is what its template carries …
    rows = template_rows([f"{p.namespace}/{p.declaration}" for p in workloads.pods])
    usage = replay_by_template(per_pod, rows)   # … and, so driven, the replay runs every pod as the lab does
    placement = json.loads((out / "placement.json").read_text())
    docs = {(d["metadata"]["namespace"], d["metadata"].get("labels", {}).get("app")): d
            for d in _docs(out, "kubernetes/production.yaml") if d["kind"] in ("Deployment", "StatefulSet", "Pod")}
    for row, pod in enumerate(workloads.pods):
        assert per_pod.vm_ids[per_pod.vm_of_pod[rows[row]]] == placement["pods"][pod.id]["vm"]
        doc = docs[(pod.namespace, pod.declaration)]
        meta = doc["metadata"] if doc["kind"] == "Pod" else doc["spec"]["template"]["metadata"]
        series = json.loads(meta["annotations"][USAGE_ANNOTATION])
        for step in (0, 100, 359):
            u, _ = usage.clipped_usage_at(step)
            assert series["cpu_m"][step] == round(u[row, 0])
            assert series["memory_mib"][step] == round(u[row, 1] / 2**20)


def _kubectl_env(tmp_path: Path, url: str) -> dict:
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\n"
                      f"clusters: [{{name: lab, cluster: {{server: '{url}'}}}}]\n"
                      "users: [{name: operator, user: {}}]\n"
                      "contexts: [{name: lab, context: {cluster: lab, user: operator}}]\ncurrent-context: lab\n")
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(config)}


def _bind_as_the_blueprint_pins(api, pods: list[dict], placement: dict) -> dict[str, str]:
    """The scheduler's part, honouring the pins the manifests carry: a hostname nodeSelector, or
    (a workload over several nodes) the blueprint's count per node; a StatefulSet's ordinal i
    goes where the blueprint put slice pod ``<set>-000i``."""
    left = {(w["namespace"], w["name"]): dict(w["nodes"]) for w in placement["workloads"]}
    bound = {}
    for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
        meta, spec = p["metadata"], p["spec"]
        ref = f"{meta['namespace']}/{meta['name']}"
        node_name = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        if not node_name:
            owner = (meta.get("ownerReferences") or [{}])[0]
            key = (meta["namespace"], meta["labels"]["app"])
            if owner.get("kind") == "StatefulSet":
                ordinal = int(meta["name"].rsplit("-", 1)[1])
                node_name = placement["pods"][f"{meta['namespace']}/{meta['labels']['app']}-{ordinal:04d}"]["node"]
            else:
                node_name = next(n for n, c in sorted(left[key].items()) if c > 0)
        if (meta["namespace"], meta.get("labels", {}).get("app")) in left and "kube-system" != meta["namespace"]:
            left[(meta["namespace"], meta["labels"]["app"])][node_name] -= 1
        if not spec.get("nodeName"):
            api.store.mutate("pods", ref, lambda o, n=node_name: o["spec"].__setitem__("nodeName", n))
        bound[ref] = node_name
    return bound


@pytest.mark.django_db
def test_kubectl_applies_the_manifests_and_production_identity_maps_every_controller_made_pod(rendered,
                                                                                                 tmp_path) -> None:
    if not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"Debian's kubectl is not at {KUBECTL}: run scripts/services kubectl (scripts/test does)")
    _, out = rendered
    placement = json.loads((out / "placement.json").read_text())
    with TestAPIServer() as api:
        for name, n in placement["nodes"].items():
            api.create("nodes", node(name, cpu=f"{CONFIG.cpu_m}m", memory=f"{CONFIG.memory_mib}Mi",
                                     labels=n["labels"]))
        env = _kubectl_env(tmp_path, api.url)
        applied = subprocess.run([str(KUBECTL), "apply", "-f", str(out / "kubernetes/production.yaml")], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert applied.returncode == 0, applied.stderr
        schedule = json.loads((out / "batch-schedule.json").read_text())["arrivals"]
        every = subprocess.run([str(KUBECTL), "apply", "--dry-run=client", "-f", str(out / "kubernetes/batch")], env=env,
                               capture_output=True, text=True, timeout=300)   # validated against the server's openapi
        assert every.returncode == 0, every.stderr
        assert every.stdout.count("(dry run)") == len(schedule)
        firsts = {}
        for a in schedule:
            firsts.setdefault(a["kind"], a)
        for a in firsts.values():   # a Job, a gang and a bare batch pod
            done = subprocess.run([str(KUBECTL), "create", "-f", str(out / a["file"])], env=env, capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, done.stderr
        workloads = load_workloads(out / "ir/workloads.yaml")
        want = len(workloads.pods) + 4 * len(placement["nodes"])   # production + one pod per DaemonSet and node
        deadline = time.monotonic() + 60
        while True:
            pods = [p for p in api.objects("pods") if p["metadata"]["namespace"] != "batch"]
            if len(pods) >= want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(pods) == want
        names = {p["metadata"]["namespace"] + "/" + p["metadata"]["name"] for p in pods}
        assert {"cache/redis-cache-0", "cache/redis-cache-9", "platform/session-store-2"} <= names
        assert "platform/api-gateway-0" in names   # a bare pod keeps its IR name
        for p in pods:   # a Deployment's pods: <deployment>-<pod-template-hash>-<5 characters>, by their ReplicaSet
            owner = (p["metadata"].get("ownerReferences") or [{}])[0]
            if owner.get("kind") == "ReplicaSet":
                digest = p["metadata"]["labels"]["pod-template-hash"]
                assert owner["name"] == f"{p['metadata']['labels']['app']}-{digest}"
                assert re.fullmatch(rf"{re.escape(owner['name'])}-[a-z0-9]{{5}}", p["metadata"]["name"])
        bound = _bind_as_the_blueprint_pins(api, pods, placement)
        blueprint = load_blueprint(out / "ir/blueprint.yaml", workloads)
        entries = BlueprintEntries.of([(p.id, p.namespace, p.declaration, p.replica_index, blueprint.assignment[p.id])
                                       for p in workloads.pods])
        live = []
        for p in pods:
            meta = p["metadata"]
            owner = next((f"{r['kind']}/{r['name']}" for r in meta.get("ownerReferences") or [] if r.get("controller")),
                         "")
            ref = f"{meta['namespace']}/{meta['name']}"
            live.append(LivePod(ref=ref, node=bound[ref], owner=owner, labels=meta.get("labels") or {}))
        identities = production_identity(live, entries)
        outcomes = Counter(i.outcome for i in identities)
        assert outcomes == {MAPPED: len(workloads.pods), DAEMONSET: 4 * len(placement["nodes"])}
        assert len({i.entry for i in identities if i.outcome == MAPPED}) == len(workloads.pods)
        deployment_pods = [i for i, p in zip(identities, live, strict=True) if p.owner.startswith("ReplicaSet/")]
        assert deployment_pods and all(i.rule == "replica" for i in deployment_pods)
        # the console: the slice's IR imported, each pod as the watch reads it observed → all on their entries
        from kalena_web.control.models import ProductionPlacement
        from kalena_web.control.observed_production import production_observe
        from kalena_web.control.services import live_cluster_import
        from kalena_web.inventory.models import Workload

        infra = load_infrastructure(out / "ir/infra.yaml")
        cluster = live_cluster_import(name="lab-identity", infra=infra, workloads=workloads, blueprint=blueprint,
                                      now_s=0.0).cluster
        for p in api.objects("pods"):
            if p["metadata"]["namespace"] == "batch":
                continue
            for event in pod_events("ADDED", p):
                assert isinstance(event, ProductionSeen)
                production_observe(cluster=cluster, ref=event.ref, node_name=event.node, request=event.requests,
                                   limit=event.limits, labels=event.labels, at_s=1.0, now_s=1.0,
                                   annotations=event.annotations, owner=event.owner, owner_error=event.owner_error,
                                   start_s=event.start_s, anti_affinity=event.anti_affinity)
        placements = ProductionPlacement.objects.filter(workload__cluster=cluster)
        assert Counter(pl.identity for pl in placements) == {ProductionPlacement.MAPPED: len(workloads.pods)}
        assert not placements.filter(finding=True).exists()
        assert Workload.objects.filter(cluster=cluster).count() == len(workloads.pods)   # no extra charged


@pytest.mark.django_db
def test_the_ir_slice_imports_into_the_console_with_no_hard_blueprint_violation(rendered) -> None:
    from kalena_web.control.services import live_cluster_import

    result, out = rendered
    infra = load_infrastructure(out / "ir/infra.yaml")
    workloads = load_workloads(out / "ir/workloads.yaml")
    blueprint = load_blueprint(out / "ir/blueprint.yaml", workloads)
    imported = live_cluster_import(name="lab-slice", infra=infra, workloads=workloads, blueprint=blueprint, now_s=0.0)
    assert imported.nodes == CONFIG.nodes and imported.production == len(result.production.pods)
    capacity = phase0_capacity(infra)
    assert capacity[0, 0] == CONFIG.cpu_m - sum(ds.cpu_m for ds in result.production.daemonsets)


def test_the_same_seed_gives_the_same_slice_and_another_seed_another(inputs) -> None:
    infra = load_infrastructure(inputs["infra"])
    workloads = load_workloads(inputs["workloads"])
    blueprint = load_blueprint(inputs["blueprint"], workloads)
    a = slice_production(infra, workloads, blueprint, LabShape(), seed=3)
    b = slice_production(infra, workloads, blueprint, LabShape(), seed=3)
    c = slice_production(infra, workloads, blueprint, LabShape(), seed=4)
    assert a.node_map == b.node_map and [p.source_id for p in a.pods] == [p.source_id for p in b.pods]
    assert a.node_map != c.node_map
    tasks = read_batch_task(inputs["batch_trace"])
    kw = dict(slack_m_s=1e6, load_factor=1.0, speed=10, hours=6, offset_s=86_400, cpu_scale=1 / 256,
              memory_scale=1 / 1024, min_wall_s=10, max_pod_cpu_m=62, max_pod_memory_mib=64, max_pods=300)
    assert sample_batch(tasks, seed=3, **kw).groups == sample_batch(tasks, seed=3, **kw).groups
    assert sample_batch(tasks, seed=3, **kw).groups != sample_batch(tasks, seed=4, **kw).groups


def _kalena(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([str(ROOT / ".venv" / "bin" / "kalena"), *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


@pytest.mark.parametrize(("flag", "key"), [("--batch-trace", "batch_trace"), ("--usage-dir", "usage_dir"),
                                           ("--ir", "workloads")])
def test_a_missing_data_file_is_refused_naming_the_file_and_its_flag_and_nothing_is_written(tmp_path, flag,
                                                                                          key) -> None:
    missing = tmp_path / "nowhere" / Path(DEFAULT_INPUTS[key][0]).name
    out = tmp_path / "out"
    done = _kalena("lab", "slice", "--out", str(out), flag, str(missing))
    assert done.returncode == 2
    assert str(missing) in done.stderr and flag in done.stderr
    assert not out.exists()


def test_bad_lab_shapes_and_a_used_output_folder_are_refused(inputs, tmp_path) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    done = _kalena("lab", "slice", "--out", str(used))
    assert done.returncode == 2 and "--out" in done.stderr and (used / "keep.txt").read_text() == "mine"
    infra = load_infrastructure(inputs["infra"])
    workloads = load_workloads(inputs["workloads"])
    blueprint = load_blueprint(inputs["blueprint"], workloads)
    with pytest.raises(InputError, match="blueprint nodes can be sliced") as err:
        slice_production(infra, workloads, blueprint, LabShape(nodes=60), seed=0)
    assert err.value.field == "--nodes/--max-pods-per-node"
    with pytest.raises(InputError) as err:
        slice_production(infra, workloads, blueprint, LabShape(nodes=4, cpu_m=2, memory_mib=256), seed=0)
    assert "--cpu-m" in err.value.field


def test_the_docker_form_holds_the_same_pods_with_kalenas_labels_and_identity_maps_them_by_name(rendered) -> None:
    _, out = rendered
    containers = json.loads((out / "docker/production.json").read_text())
    workloads = load_workloads(out / "ir/workloads.yaml")
    blueprint = load_blueprint(out / "ir/blueprint.yaml", workloads)
    placement = json.loads((out / "placement.json").read_text())
    production = [c for c in containers if "kalena.naughtian.io/daemonset" not in c["labels"]]
    daemons = [c for c in containers if c["labels"].get("kalena.naughtian.io/daemonset") == "true"]
    assert len(daemons) == 4 * len(placement["nodes"])
    assert sorted(c["labels"]["kalena.naughtian.io/workload"] for c in production) == sorted(p.id for p in workloads.pods)
    k8s = {}
    for d in _docs(out, "kubernetes/production.yaml"):
        if d["kind"] in ("Deployment", "StatefulSet"):
            k8s[(d["metadata"]["namespace"], d["metadata"]["name"])] = d["spec"]["template"]["metadata"]["annotations"]
        elif d["kind"] == "Pod":
            k8s[(d["metadata"]["namespace"], d["metadata"]["labels"]["app"])] = d["metadata"]["annotations"]
    by_id = {p.id: p for p in workloads.pods}
    for c in production:
        pod = by_id[c["labels"]["kalena.naughtian.io/workload"]]
        assert c["node"] == blueprint.assignment[pod.id]
        assert c["labels"]["kalena.naughtian.io/tier"] == "service"
        assert c["labels"][USAGE_ANNOTATION] == k8s[(pod.namespace, pod.declaration)][USAGE_ANNOTATION]
        assert c["labels"]["kalena.naughtian.io/request-cpu"] == f"{round(pod.requests[0])}m"
        assert int(c["labels"]["kalena.naughtian.io/request-memory"]) == pod.requests[1]
        assert c["mem_limit"] >= c["mem_reservation"] == pod.requests[1]
    entries = BlueprintEntries.of([(p.id, p.namespace, p.declaration, p.replica_index, blueprint.assignment[p.id])
                                   for p in workloads.pods])
    identities = production_identity([LivePod(ref=c["labels"]["kalena.naughtian.io/workload"], node=c["node"])
                                      for c in production], entries)
    assert {(i.outcome, i.rule) for i in identities} == {(MAPPED, "name")}
    batch = json.loads((out / "docker/batch.json").read_text())
    schedule = json.loads((out / "batch-schedule.json").read_text())["arrivals"]
    assert [(b["at_s"], len(b["refs"])) for b in batch] == [(a["at_s"], a["pods"]) for a in schedule]
    assert all(b["labels"]["kalena.naughtian.io/tier"] == "batch" and WORK_ANNOTATION in b["labels"] for b in batch)


def test_kalena_lab_slice_writes_the_files_and_prints_the_summary(tmp_path) -> None:
    out = tmp_path / "slice"
    done = _kalena("lab", "slice", "--out", str(out), "--nodes", "2", "--hours", "1", "--speed", "20",
                   "--load-factor", "0.5", "--seed", "7")
    assert done.returncode == 0, done.stderr
    assert "load factor 0.5 stated" in done.stdout and "lab-1 ←" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lab"]["nodes"] == ["lab-1", "lab-2"] and summary["compression"]["wall_minutes"] == 3.0
    assert summary["batch"]["measured_load_factor"] == pytest.approx(0.5, rel=0.02)
    for rel in ("kubernetes/production.yaml", "batch-schedule.json", "docker/production.json", "docker/batch.json",
                "ir/infra.yaml", "ir/workloads.yaml", "ir/blueprint.yaml", "placement.json", "summary.txt"):
        assert (out / rel).is_file(), rel
    usage = next(json.loads(d["spec"]["template"]["metadata"]["annotations"][USAGE_ANNOTATION])
                 for d in _docs(out, "kubernetes/production.yaml") if d["kind"] in ("Deployment", "StatefulSet"))
    assert usage["step_s"] == 3.0 and len(usage["cpu_m"]) == 60   # 1 h in 60 s steps, each 60 / 20 s of wall time
