"""`kalena cluster import --manifests`: the forge manifests as a live cluster (3 nodes at their
Phase-0 capacity, 3 production pods), and a blueprint breaking the hard podAffinity refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path, data_dir: Path) -> dict[str, str]:
    env = {**os.environ, "KALENA_DB_PATH": str(tmp_path / "k.sqlite3"), "KALENA_VAR_DIR": str(tmp_path / "var"),
           "KALENA_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "kalena_web.settings"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], check=True, env=env, cwd=ROOT)
    return env


def kalena(env, *args):
    return subprocess.run([sys.executable, "-m", "kalena_web.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


def blueprint(tmp_path: Path, ps_node: str) -> str:
    path = tmp_path / f"bp-{ps_node}.yaml"
    path.write_text(f"solution:\n  ai/trainer-0000: gpu-a\n  ai/trainer-0001: gpu-b\n  ai/parameter-server-0: {ps_node}\n")
    return str(path)


def test_forge_manifests_import_as_a_cluster(env, tmp_path, kuberina_dir):
    forge = str(kuberina_dir / "forge-manifests")
    refused = kalena(env, "cluster", "import", "forge", "--manifests", forge, "--blueprint", blueprint(tmp_path, "std-a"))
    assert refused.returncode == 2 and "pod_affinity 1" in refused.stderr
    done = kalena(env, "cluster", "import", "forge", "--manifests", forge, "--blueprint", blueprint(tmp_path, "gpu-b"))
    assert done.returncode == 0, done.stderr
    assert "3 nodes, 3 production pods" in done.stdout
    assert "spec.selector missing" in done.stdout
    check = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from kalena_web.ledger.models import LiveNodeLedger as L; "
         "print(sorted((l.node.name, l.capacity[0], l.capacity[1] / 2**30, l.prod_request[0]) for l in L.objects.all()))"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert check.stdout.strip() == ("[('gpu-a', 63900.0, 255.875, 8250.0), ('gpu-b', 63900.0, 255.875, 12250.0), "
                                    "('std-a', 15900.0, 63.875, 0.0)]"), check.stderr
    missing = kalena(env, "cluster", "import", "x", "--manifests", str(tmp_path / "nope"), "--blueprint",
                     blueprint(tmp_path, "gpu-b"))
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
