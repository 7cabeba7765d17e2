"""The waste view (Live → Waste): per namespace and workload, request vs usage vs reservation now,
and over the window the idle request and the core-hours Kalena reclaimed from it."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from django.contrib.auth.models import User

from kalena_web.archive.models import UsageRollup
from kalena_web.console.waste import waste
from kalena_web.inventory.models import Workload
from kalena_web.ledger.models import WorkloadReservation


@pytest.fixture
def viewer(client, live):
    client.force_login(User.objects.create_user("viewer", password="x" * 12))
    return client


def fill(cluster, *, minutes: int, reservation_ratio: float, usage_ratio: float, now_s: float) -> None:
    rows = []
    for w in Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION):
        q = np.array(w.request, dtype=float)
        WorkloadReservation.objects.update_or_create(workload=w, defaults=dict(
            value=(q * reservation_ratio).tolist(), updated_s=now_s, last_sample_s=now_s,
            last_usage=(q * usage_ratio).tolist()))
        rows += [UsageRollup(cluster=cluster, resolution="1m", bucket_s=now_s - 60 * (m + 1), workload=w, samples=4,
                             usage_mean=(q * usage_ratio).tolist(), usage_peak=(q * usage_ratio).tolist(),
                             reservation=(q * reservation_ratio).tolist()) for m in range(minutes)]
    UsageRollup.objects.bulk_create(rows)


def test_reclaimed_core_hours_are_request_minus_reservation_over_the_window(live) -> None:
    now = time.time()
    fill(live, minutes=120, reservation_ratio=0.4, usage_ratio=0.3, now_s=now)
    view = waste(live, window_s=3600.0, now_s=now)
    requested = sum(np.array(w.request)[0] / 1000.0 for w in Workload.objects.filter(cluster=live, kind="production"))
    total = view["total"]
    # the last hour holds 60 minute rows per pod (the 60 older ones fall outside the window)
    assert total.reclaimed_hours[0] == pytest.approx(requested * 0.6 * 1.0)
    assert total.idle_hours[0] == pytest.approx(requested * 0.7 * 1.0)
    assert total.reservation[0] == pytest.approx(requested * 0.4) and total.usage[0] == pytest.approx(requested * 0.3)
    assert total.unobserved == 0 and total.pods == Workload.objects.filter(cluster=live, kind="production").count()
    namespaces = [ns.namespace for ns, _ in view["namespaces"]]
    assert len(namespaces) == len(set(namespaces)) > 1
    hours = [ns.reclaimed_hours[0] for ns, _ in view["namespaces"]]
    assert hours == sorted(hours, reverse=True)  # the biggest reclaim first


def test_the_page_is_in_the_nav_and_shows_each_namespace_and_workload(viewer, live) -> None:
    now = time.time()
    fill(live, minutes=30, reservation_ratio=0.5, usage_ratio=0.25, now_s=now)
    cluster_page = viewer.get(f"/live/{live.name}/").content.decode()
    assert f'href="/live/{live.name}/waste/"' in cluster_page
    page = viewer.get(f"/live/{live.name}/waste/?window=1h")
    assert page.status_code == 200
    html = page.content.decode()
    for w in Workload.objects.filter(cluster=live, kind="production"):
        assert (w.owner or w.name) in html
    assert re.search(r"Reclaimed <strong>[0-9.,]+ core-hours</strong>", html)
    assert viewer.get(f"/live/{live.name}/waste/?window=5y").status_code == 400
    assert viewer.get("/live/nowhere/waste/").status_code == 404


def test_a_cluster_without_samples_counts_every_pod_unobserved(live) -> None:
    view = waste(live, window_s=3600.0)
    assert view["total"].reclaimed_hours[0] == 0 and view["total"].unobserved == view["total"].pods > 0
    with pytest.raises(ValueError, match="window"):
        waste(live, window_s=0)
