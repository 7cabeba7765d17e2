"""In a real browser (Debian's Chromium): the policy page's *Version each part applies* table.
The Kubernetes Lease holder (against the test API server, real ``kubernetes`` client) and the
scheduler extender decide with version 0; the operator saves a namespace cap in the browser; the
page flags both parts behind until each has decided again. Screenshots in artifacts/browser/
(policy-parts-*.png)."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
from django.contrib.auth.models import Group, Permission
from django.test import override_settings
from kubernetes import client as k8s

from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.lease import LeaderElector
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node
from kalena_web.control.leading import ClusterScheduler
from kalena_web.kubehooks.routing import HOOKS_URLCONF
from tests.web.conftest import PASSWORD
from tests.web.live_cluster import NODES, import_homelab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_policy_page_flags_a_part_behind_until_its_next_pass(live_server, chromium, django_user_model, artifacts,
                                                                 kuberina_dir, tmp_path, client) -> None:
    cluster = import_homelab(kuberina_dir, tmp_path, now_s=time.time() - 600)
    group, _ = Group.objects.get_or_create(name="operator")
    group.permissions.add(Permission.objects.get(codename="tune_policy"))
    django_user_model.objects.create_user(username="olga", password=PASSWORD).groups.add(group)
    with TestAPIServer() as api:
        for name in NODES:
            api.create("nodes", node(name))
        orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), identity="kalena-a")
        s = ClusterScheduler(cluster=cluster, orchestrator=orch, rng=np.random.default_rng(0),
                             elector=LeaderElector(orch, identity="kalena-a", lease_duration_s=30.0))
        assert s.elector.try_acquire_or_renew()
        s.run_pass()
        pod = {"metadata": {"name": "sweep-k8m2n", "namespace": "team-a", "uid": "uid-sweep-k8m2n",
                            "labels": {"kalena.naughtian.io/tier": "batch"},
                            "ownerReferences": [{"kind": "Job", "name": "sweep", "controller": True, "uid": "j"}]},
               "spec": {"containers": [{"name": "main", "image": "busybox",
                                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]}}
        # kube-scheduler's call, on the hooks listener's URL map in extender mode
        with override_settings(ROOT_URLCONF=HOOKS_URLCONF, KALENA_ADMISSION_EXTENDER_MODE=True,
                               KALENA_ORCHESTRATOR="kubernetes"):
            assert client.post("/kubernetes/extender/home/filter", content_type="application/json",
                               data=json.dumps({"Pod": pod, "NodeNames": NODES})).status_code == 200

        page = chromium.new_page(viewport={"width": 1440, "height": 1000})
        try:
            page.goto(f"{live_server.url}/policy/home/")
            page.fill("#id_username", "olga")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(re.compile(r"/policy/home/$"))
            assert "v0" in page.inner_text("#parts-policy tr[data-part=scheduler]")
            page.fill("textarea[name=namespaces]", "team-a: 1")
            page.click("#run-preflight")
            page.wait_for_selector("#preflight")
            page.click("#save")
            page.wait_for_url(re.compile(r"/policy/home/history/\?saved=1$"))

            page.goto(f"{live_server.url}/policy/home/")
            for part in ("scheduler", "extender"):
                assert "behind: v0, current v1" in page.inner_text(f"#parts-policy tr[data-part={part}]")
            assert "has not run for this cluster" in page.inner_text("#parts-policy tr[data-part=publisher]")
            page.locator("#parts-policy").screenshot(path=str(artifacts / "policy-parts-behind.png"))

            s.run_pass()  # the scheduler's next pass reads version 1
            page.reload()
            assert "current" in page.inner_text("#parts-policy tr[data-part=scheduler]")
            assert "behind: v0, current v1" in page.inner_text("#parts-policy tr[data-part=extender]")
            page.screenshot(path=str(artifacts / "policy-parts.png"), full_page=True)
        finally:
            page.close()
