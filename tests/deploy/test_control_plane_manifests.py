"""The control plane's deployment files parse and call commands that exist with flags the
parsers accept, read settings that exist, and grant the scheduler exactly what it uses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from kalena_web.celery import app as celery_app
from kalena_web.cli import build_parser
from kalena_web.control.schedules import PERIODS_S
from kalena_web.settings import FILE_SETTINGS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SETTINGS = (Path(__file__).resolve().parents[2] / "kalena_web" / "settings.py").read_text()


def containers() -> list[tuple[str, list[str], dict]]:
    out = []
    for doc in yaml.safe_load_all((DEPLOY / "kubernetes/control-plane.yaml").read_text()):
        spec = (doc.get("spec") or {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []):
            out.append((f"k8s {doc['metadata']['name']}", (c.get("command") or []) + (c.get("args") or []), c))
    for name in ("compose/docker-compose.yml", "swarm/stack.yml"):
        for svc, c in yaml.safe_load((DEPLOY / name).read_text())["services"].items():
            entry = c.get("entrypoint") or []
            command = c.get("command") or []
            if "image" in c and "kalena/control-plane" in c["image"]:
                out.append((f"{name} {svc}", (entry or ["kalena"]) + command, c))
    return out


def _commands(argv: list[str]) -> list[list[str]]:
    """``sh -c "a && exec b"`` → ``[a, b]``; anything else is one command."""
    if argv[:2] == ["sh", "-c"]:
        return [shlex.split(part.strip().removeprefix("exec ")) for part in argv[2].split("&&")]
    return [argv]


def _check_command(argv: list[str]) -> None:
    if argv[:1] == ["celery"]:
        assert argv[1:3] == ["-A", "kalena_web"] and argv[3] in ("worker", "beat")
        return
    args = argv[1:] if argv[:1] == ["kalena"] else argv
    parsed = build_parser().parse_args(args)  # exits (fails the test) on an unknown flag
    assert parsed.command in ("serve", "probe", "migrate", "watch")


@pytest.mark.parametrize(("where", "argv", "spec"), containers(), ids=[c[0] for c in containers()])
def test_every_command_exists_with_accepted_flags(where, argv, spec) -> None:
    for command in _commands(argv):
        _check_command(command)
    probes = [spec.get("healthcheck", {}).get("test", [])[1:]] if "healthcheck" in spec else []
    probes += [p["exec"]["command"] for p in (spec.get("livenessProbe"), spec.get("readinessProbe")) if p and "exec" in p]
    for probe in probes:
        assert probe[:2] == ["kalena", "probe"], probe
        _check_command(probe)


def test_environment_names_are_settings_kalena_reads() -> None:
    names = set()
    for _, _, spec in containers():
        env = spec.get("environment") or {}
        names |= set(env) if isinstance(env, dict) else set()
    for doc in yaml.safe_load_all((DEPLOY / "kubernetes/control-plane.yaml").read_text()):
        if doc["kind"] == "ConfigMap":
            names |= set(doc["data"])
    names -= {"DOCKER_HOST"}  # read by the Docker SDK
    names = {n.removesuffix("_FILE") if n.removesuffix("_FILE") in FILE_SETTINGS else n for n in names}
    for name in names:
        assert re.search(rf'"{name}"', SETTINGS), f"{name} is not read by kalena_web/settings.py"


def test_scheduler_rbac_binds_and_evicts_and_nothing_more() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes/control-plane.yaml").read_text()))
    # the Lease's Role lives in kube-system; the console's role is its own (tests/web/kubernetes/test_rbac.py)
    roles = [d for d in docs if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] != "kalena-console"]
    grants = {(r, v) for role in roles for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("pods/binding", "create") in grants and ("pods/eviction", "create") in grants
    assert {("pods", "watch"), ("nodes", "watch"), ("pods/status", "patch"), ("leases", "update")} <= grants
    assert not any(v in ("delete", "*") for _, v in grants)
    assert {r for r, v in grants if v == "update"} == {"leases"}  # the Lease only: pods are never rewritten


def test_beat_schedules_only_registered_tasks() -> None:
    celery_app.loader.import_default_modules()
    for name in PERIODS_S:
        assert name in celery_app.tasks, f"{name} is scheduled but no task has that name"
