"""Tester 10: the REST submit path (Docker, Swarm, automation) takes the same label values the
watch does, and one pod whose label value is not a string stops every scheduling pass."""

from __future__ import annotations

import pytest

from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import BatchRejected
from tests.web.scheduling.test_scheduling_pass import run_pass, submit


def test_a_submitted_label_value_that_is_not_a_string_is_refused_or_harmless(live) -> None:
    """Observed: ``batch_submit(labels={"app": ["a", "b"]})`` is accepted (only JSON-ness is
    checked: ``check_json_values``), and the next scheduling pass raises ``TypeError: unhashable
    type: 'list'`` in ``kalena_engine/placement/scheduler.py`` ``_drop_unplaceable``; the good pod
    is never placed. Expected: a 400-style ``BatchRejected`` naming ``labels.app`` — or, if
    accepted, the pass places the good pod."""
    try:
        submit(live, "batch/bad-0", labels={"app": ["a", "b"]})
    except BatchRejected as exc:
        assert "labels" in str(exc)
        return
    submit(live, "batch/good-0")
    report = run_pass(live)
    assert report.placed >= 1
    assert BatchPod.objects.get(workload__name="batch/good-0").state == BatchPod.BOUND
