"""Schemathesis's command line with every check (``-c all``) against a live server of this
Kalena, over every operation of the API's own OpenAPI schema, as an administrator with a
full-scope API token, beside the live homelab cluster — the run an outside check makes.

It must find nothing: no answer with a status the schema does not declare for that operation
(``status_code_conformance``), no schema-valid request refused (``positive_data_acceptance``),
no schema-invalid request accepted (``negative_data_rejection``), no 5xx, every body and content
type as declared. The run is bounded and reproducible: ``--generation-deterministic`` (no seed,
no example database), two examples per operation per mode and phase, two workers — 2,404 cases
(1,459 before the submit body's schema was typed) in about two minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from kalena_web.api.services import api_token_create
from tests.web.live_cluster import NODES

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = 2  # per operation, per generation mode and phase: ~2,400 cases in all
# Half the generated cluster and node names are the live cluster's, so that requests reach real
# rows (a node's agent and tokens listed, a token made and revoked, an export, a pod queued), the
# other half names nothing (404). No operation is exempt: the submit body's schema states its
# quantities, labels and constraints (kalena_web/scheduling/schemas.py).
CONFIG = f"""
[dictionaries.clusters]
values = ["home"]

[dictionaries.nodes]
values = {json.dumps(NODES)}

[parameters]
"path.cluster" = {{ dictionary = "clusters", probability = 0.5 }}
"path.node" = {{ dictionary = "nodes", probability = 0.5 }}
"""


@pytest.fixture
def admin_token(db) -> str:
    user = User.objects.create_superuser("schemathesis-admin", password="x" * 16)
    token, _ = api_token_create(user=user, name="schemathesis")
    return token


def test_every_check_over_every_operation_finds_nothing(live_server, live, admin_token, tmp_path) -> None:
    report = tmp_path / "schemathesis.json"
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "run",
               f"{live_server.url}/api/openapi.json",
               "--checks", "all", "--max-examples", str(EXAMPLES), "--generation-deterministic", "--workers", "2",
               "--continue-on-failure", "--no-color",
               "--request-timeout", "60", "--header", f"Authorization: Bearer {admin_token}",
               "--report", "json", "--report-json-path", str(report)]
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    elapsed_s = time.monotonic() - started
    assert report.exists(), run.stdout[-5_000:] + run.stderr[-5_000:]
    summary = json.loads(report.read_text())
    print(f"schemathesis: {summary['test_cases']['generated']} cases over {summary['operations']['tested']} "
          f"operations in {elapsed_s:.0f} s")
    found = {f"{f['code']} {f['title']}": f["operations"] for f in summary["failures"]}
    assert found == {} and summary["errors"] == [], run.stdout[-20_000:]
    assert run.returncode == 0, run.stdout[-5_000:] + run.stderr[-5_000:]
    assert summary["operations"]["tested"] == summary["operations"]["total"] >= 24
    assert summary["test_cases"]["generated"] >= 500
