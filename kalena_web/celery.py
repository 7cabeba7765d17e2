"""The Celery application of Kalena's control loops (``celery -A kalena_web worker``).

Task names are stable (``kalena.<app>.<verb>``); all periodic schedules live in
:mod:`kalena_web.control.schedules`. Settings come from Django's (``CELERY_*``).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")

app = Celery("kalena")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _schedules(sender: Celery, **_: object) -> None:
    from kalena_web.control.schedules import beat_schedule

    sender.conf.beat_schedule = beat_schedule()


def _add_worker_heartbeat() -> None:
    from kalena_web.control.heartbeat import WorkerHeartbeat

    app.steps["worker"].add(WorkerHeartbeat)


_add_worker_heartbeat()
