"""Discovery: tier/priority/annotations (docs/design.md §4) from the workloads file and kubelet pods;
bad metadata is reported with the workload and key and changes nothing else."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from agents.collectors.kubelet import KubeletClient
from agents.discovery.files import FileSource, parse_workloads_file
from agents.discovery.kubelet import KubeletSource, parse_pod_list, pod_cgroup
from agents.discovery.labels import classify
from agents.errors import ConfigError, DiscoveryError
from kalena_engine.resources import CPU, RAM
from tests.agents.conftest import load_fixture

MIB = 2**20


@pytest.mark.parametrize(("labels", "annotations", "kwargs", "expected"), [
    pytest.param({}, {}, {}, ("service", 0, True, False, False), id="unlabelled is service"),
    pytest.param({"kalena.naughtian.io/tier": "batch"}, {"kalena.naughtian.io/priority": "7",
                  "kalena.naughtian.io/slack-cpu": "deny", "kalena.naughtian.io/slack-memory": "allow"}, {},
                 ("batch", 7, False, True, False), id="batch with switches"),
    pytest.param({}, {"kalena.naughtian.io/reclaim": "disabled"}, {}, ("service", 0, True, False, True), id="reclaim disabled"),
    pytest.param({}, {}, {"job_owned": True}, ("service", 0, True, False, False), id="job without inference"),
    pytest.param({}, {}, {"job_owned": True, "infer_jobs": True}, ("batch", 0, True, False, False), id="job inferred batch"),
    pytest.param({"kalena.naughtian.io/tier": "batch"}, {}, {"daemonset": True}, ("daemonset", 0, True, False, False),
                 id="daemonset wins"),
])
def test_classify(labels, annotations, kwargs, expected) -> None:
    c = classify(labels, annotations, source="w", **kwargs)
    assert (c.tier, c.priority, c.slack_cpu, c.slack_memory, c.reclaim_disabled) == expected


@pytest.mark.parametrize(("labels", "annotations", "key"), [
    pytest.param({"kalena.naughtian.io/tier": "best-effort"}, {}, "kalena.naughtian.io/tier", id="unknown tier"),
    pytest.param({}, {"kalena.naughtian.io/priority": "-1"}, "kalena.naughtian.io/priority", id="negative priority"),
    pytest.param({}, {"kalena.naughtian.io/slack-cpu": "yes"}, "kalena.naughtian.io/slack-cpu", id="bad switch"),
])
def test_bad_labels_raise_or_default(labels, annotations, key: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        classify(labels, annotations, source="docker:web")
    assert key in str(info.value) and "docker:web" in str(info.value) and "accepted" in str(info.value)
    errors: list[str] = []
    c = classify(labels, annotations, source="docker:web", errors=errors)
    assert len(errors) == 1 and c.tier in ("service", "batch")


def test_pod_list_fixture() -> None:
    result = parse_pod_list(load_fixture("kubelet_pods.json"), source="kubelet")
    by_id = {w.id: w for w in result.workloads}
    assert "batch/done-1" not in by_id                                        # C3: terminated pods never count
    web = by_id["default/web-0"]
    assert (web.tier, web.grace_s, web.request[CPU], web.limit[RAM]) == ("service", 45.0, 1000.0, 2**30)
    assert web.cgroup == "kubepods/pod11111111-2222-3333-4444-555555555555"   # Guaranteed
    job = by_id["batch/job-a-xyz"]
    # requests: containers 250m + 250m = 500m, init container 1 → max(500m, 1) = 1 core; 256 Mi memory
    assert (job.tier, job.priority, job.request[CPU], job.request[RAM]) == ("batch", 3, 1000.0, 256 * MIB)
    # limits: the init container declares none, so the pod has no limit (the kubelet sets none either)
    assert (math.isinf(job.limit[CPU]), math.isinf(job.limit[RAM]), job.slack_memory) == (True, True, True)
    assert job.cgroup == "kubepods/burstable/pod66666666-7777-8888-9999-000000000000"
    assert by_id["kube-system/node-exporter-abc"].tier == "daemonset"
    assert by_id["batch/leaving"].terminating                                 # C4: deletionTimestamp → credited
    assert by_id["batch/untagged-job"].tier == "service"
    assert by_id["default/bad-prio"].priority == 0
    assert len(result.errors) == 1 and "kubelet:default/bad-prio" in result.errors[0]
    inferred = {w.id: w for w in parse_pod_list(load_fixture("kubelet_pods.json"), source="k", infer_jobs=True).workloads}
    assert inferred["batch/untagged-job"].tier == "batch"


def test_pod_cgroup_paths_for_both_drivers() -> None:
    assert pod_cgroup("ab-cd", "BestEffort") == "kubepods/besteffort/podab-cd"
    assert pod_cgroup("ab-cd", "Burstable", driver="systemd") == \
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab_cd.slice"
    assert pod_cgroup("ab-cd", "Guaranteed", driver="systemd") == "kubepods.slice/kubepods-podab_cd.slice"
    with pytest.raises(DiscoveryError, match="qosClass"):
        pod_cgroup("ab", "Premium")


def test_kubelet_source_over_http_and_unreachable_kubelet(json_server) -> None:
    json_server.routes["/pods"] = load_fixture("kubelet_pods.json")
    source = KubeletSource(KubeletClient(json_server.url))
    result = source.discover(time.time())
    assert result.complete and "default/web-0" in {w.id for w in result.workloads}
    pending = {w.id: w for w in result.workloads}["default/bad-prio"]
    assert math.isfinite(pending.start_s)                                      # pending pod counted from now
    json_server.close()
    down = source.discover(time.time())
    assert not down.complete and down.errors                                  # caller keeps the previous list


def test_workloads_file(tmp_path) -> None:
    doc = {"workloads": [
        {"id": "web", "cgroup": "/kalena/web", "labels": {"kalena.naughtian.io/tier": "service"},
         "requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}, "start_time": 100.0},
        {"id": "job", "cgroup": "kalena/job", "labels": {"kalena.naughtian.io/tier": "batch"},
         "annotations": {"kalena.naughtian.io/priority": "2"}, "termination_grace_period_seconds": 5},
    ]}
    result = parse_workloads_file(json.dumps(doc), source="w.json", first_seen={}, now_s=1000.0)
    web, job = result.workloads
    assert (web.cgroup, web.request[CPU], web.limit[RAM], math.isinf(web.limit[CPU]), web.start_s) == (
        "kalena/web", 500.0, 128 * MIB, True, 100.0)
    assert (job.tier, job.priority, job.grace_s, job.start_s) == ("batch", 2, 5.0, 1000.0)


@pytest.mark.parametrize(("doc", "where"), [
    pytest.param({"workloads": [{"id": "a", "cgroup": "x", "limit": {}}]}, "workloads[0]: unknown key 'limit'", id="unknown key"),
    pytest.param({"workloads": [{"id": "a"}]}, "workloads[0].cgroup", id="missing cgroup"),
    pytest.param({"workloads": [{"id": "a", "cgroup": "x"}, {"id": "a", "cgroup": "y"}]}, "duplicate id", id="duplicate"),
    pytest.param({"workloads": [{"id": "a", "cgroup": "x", "start_time": "now"}]}, "workloads[0].start_time", id="bad number"),
    pytest.param({"pods": []}, "'workloads' list", id="wrong top level"),
])
def test_bad_workloads_file_names_file_and_field(doc, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_workloads_file(json.dumps(doc), source="/etc/kalena/w.json", first_seen={}, now_s=0.0)
    assert "/etc/kalena/w.json" in str(info.value) and where in str(info.value)


def test_file_source_keeps_last_good_list_on_a_bad_rewrite(tmp_path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"workloads": [{"id": "a", "cgroup": "x"}]}))
    source = FileSource(path)
    assert [w.id for w in source.load(0.0).workloads] == ["a"]
    path.write_text("{broken")
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    result = source.discover(1.0)
    assert [w.id for w in result.workloads] == ["a"] and "keeping the last good list" in result.errors[0]
    with pytest.raises(ConfigError, match="not valid JSON/YAML"):
        source.load(2.0)
