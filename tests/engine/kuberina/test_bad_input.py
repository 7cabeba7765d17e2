"""Malformed IR: a clear error naming file, line, field and what is accepted; nothing used."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kalena_engine.errors import BlueprintRefused, IRError
from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


NODE = """\
nodes:
  - name: a
    allocatable:
      cpu: 4
      {extra}
"""


@pytest.mark.parametrize(
    ("extra", "words", "line"),
    [
        pytest.param('ram: "16G"', ["ram", "'16G'", "Ki, Mi, Gi, Ti"], 5, id="decimal ram suffix"),
        pytest.param("disk_read: 500", ["disk_read", "disk: {read"], 5, id="flat disk_read names nested form"),
        pytest.param("memory: 4", ["memory", "ram"], 5, id="unknown resource key"),
    ],
)
def test_bad_node_allocatable(tmp_path: Path, extra: str, words: list[str], line: int) -> None:
    path = write(tmp_path, "infra.yaml", NODE.format(extra=extra))
    with pytest.raises(IRError) as caught:
        load_infrastructure(path)
    message = str(caught.value)
    assert f"infra.yaml:{line}" in message
    assert "nodes[a].allocatable" in message
    for word in words:
        assert word in message


def test_ir_v1_rejects_unknown_key_and_other_versions(tmp_path: Path) -> None:
    path = write(tmp_path, "w.yaml", """\
        apiVersion: kuberina.io/v1
        kind: Workloads
        namespaces:
          web:
            - name: api
              replica: 2
        """)
    with pytest.raises(IRError, match=r"w\.yaml:6: namespaces\.web\[api\]\.replica: unknown key 'replica'.*accepted: .*replicas"):
        load_workloads(path)
    path = write(tmp_path, "v2.yaml", "apiVersion: kuberina.io/v2\nnamespaces: {}\n")
    with pytest.raises(IRError, match="kuberina.io/v2.*accepted: kuberina.io/v1"):
        load_workloads(path)
    path = write(tmp_path, "kind.yaml", "kind: Infrastructure\nnamespaces: {}\n")
    with pytest.raises(IRError, match="does not match a Workloads document"):
        load_workloads(path)


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "nodes:\n  - name: a\n   bad: [\n")
    with pytest.raises(IRError, match=r"broken\.yaml:\d+: not valid YAML"):
        load_infrastructure(path)
    with pytest.raises(IRError, match="file not found"):
        load_infrastructure(tmp_path / "absent.yaml")


def test_groups_validation(tmp_path: Path) -> None:
    base = """\
        namespaces:
          ai:
            - name: trainer
              replicas: 4
              gang: job
        groups:
          - name: job
            members: [{member}]
            min_members: {minimum}
            colocate: true
        """
    path = write(tmp_path, "ok.yaml", base.format(member="ai/trainer", minimum=3))
    workloads = load_workloads(path)
    (group,) = workloads.groups
    assert group.min_members == 3 and group.colocate and len(group.members) == 4  # explicit block wins
    path = write(tmp_path, "bad_member.yaml", base.format(member="ai/nope", minimum=3))
    with pytest.raises(IRError, match="member 'ai/nope' matches no declaration"):
        load_workloads(path)
    path = write(tmp_path, "bad_min.yaml", base.format(member="ai/trainer", minimum=5))
    with pytest.raises(IRError, match=r"min_members 5 exceeds.*accepted: 1\.\.4"):
        load_workloads(path)


def test_infeasible_blueprint_is_refused(tmp_path: Path) -> None:
    workloads = load_workloads(write(tmp_path, "w.yaml", "namespaces:\n  a:\n    - name: x\n"))
    path = write(tmp_path, "bp.yaml", "kind: Blueprint\nmetadata:\n  feasible: false\nsolution:\n  a/x-0: n1\n")
    with pytest.raises(BlueprintRefused, match="feasible is false"):
        load_blueprint(path, workloads)


def test_legacy_entry_without_declaration(tmp_path: Path) -> None:
    path = write(tmp_path, "w.yaml", """\
        namespaces:
          a:
            - name: x
              replicas: 2
        pods:
          - name: x-0005
            namespace: a
        """)
    with pytest.raises(IRError, match=r"w\.yaml:6: pods\[x-0005\]: legacy pods entry 'a/x-0005' matches no pod"):
        load_workloads(path)


def test_a_blueprint_matching_none_of_the_workloads_is_refused(tmp_path: Path) -> None:
    """issue 16: homelab replayed with the Irina blueprint ran with thousands of "violations"."""
    workloads = load_workloads(write(tmp_path, "w.yaml", "namespaces:\n  a:\n    - name: x\n"))
    other = write(tmp_path, "bp.yaml", "kind: Blueprint\nsolution:\n  b/y-0: n1\n  b/y-1: n2\n")
    with pytest.raises(BlueprintRefused) as caught:
        load_blueprint(other, workloads)
    text = str(caught.value)
    assert "bp.yaml" in text and "none of the solution's 2 pods" in text and "w.yaml" in text and "'a/x-0'" in text
    partial = write(tmp_path, "partial.yaml", "kind: Blueprint\nsolution:\n  a/x-0: n1\n  b/y-0: n2\n")
    assert load_blueprint(partial, workloads).unknown_pods == ("b/y-0",)  # a partial match is verified, not refused


def test_an_unresolved_affinity_target_is_kept_with_file_and_pod(tmp_path: Path) -> None:
    path = write(tmp_path, "w.yaml", """\
        namespaces:
          a:
            - name: x
              antiAffinity: [nothere]
        """)
    (line,) = load_workloads(path).unresolved
    assert str(path) in line and "pod a/x-0" in line and "'nothere'" in line
