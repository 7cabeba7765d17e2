"""A kubectl call the lab's API server does not answer in time (a loaded machine) is not a crash
of the day: `kalena lab play` says so for that arrival and plays the rest."""

from __future__ import annotations

import pytest

from agents.lab.errors import LabError


def _state(tmp_path, script: str) -> dict:
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/sh\n" + script)
    kubectl.chmod(0o755)
    (tmp_path / "slice").mkdir()
    return {"kubectl": str(kubectl), "directory": str(tmp_path), "kubeconfig": str(tmp_path / "kubeconfig"),
            "slice": {"directory": str(tmp_path / "slice")}}


def test_a_kubectl_call_that_does_not_answer_comes_back_as_a_failure_naming_the_wait(tmp_path) -> None:
    from agents.lab.kubernetes import kubectl

    state = _state(tmp_path, 'case "$3" in *slow*) exec sleep 30;; *) echo "job.batch/$3 created";; esac\n')
    done = kubectl(state, "create", "-f", "slow.yaml", check=False, timeout_s=0.5)
    assert done.returncode == 124 and "did not answer within 0.5 s" in done.stderr
    with pytest.raises(LabError, match="did not answer within 0.5 s"):
        kubectl(state, "create", "-f", "slow.yaml", timeout_s=0.5)


def test_play_goes_on_past_an_arrival_kubectl_could_not_create_in_time(tmp_path, monkeypatch) -> None:
    import agents.lab.kubernetes as kube
    from agents.lab.day import _play_arrivals

    state = _state(tmp_path, 'case "$3" in *slow*) exec sleep 30;; *) echo "job.batch/$3 created";; esac\n')
    real = kube.kubectl
    monkeypatch.setattr(kube, "kubectl", lambda *a, **k: real(*a, **{**k, "timeout_s": 0.5}))
    arrivals = [{"at_s": 0.0, "file": f"{n}.yaml", "kind": "Job", "name": n, "pods": 1} for n in ("a", "slow", "c")]
    said: list[str] = []
    _play_arrivals(state, arrivals, 0.0, said.append, lambda s: None)
    assert len(said) == 3
    assert "did not answer within 0.5 s" in said[1] and said[2].endswith("c.yaml created")
