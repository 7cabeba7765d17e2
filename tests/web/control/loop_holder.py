"""A worker stand-in for the loop lock tests: runs the real loop tasks of the loops named on the
command line, each on its own thread, for one cluster; every task takes its real lock through
:func:`kalena_web.control.loops.run_for_clusters` and then its work stays open (the first call
of its pass blocks) until the file given as release exists.

Usage: ``python loop_holder.py <cluster id> <release file> <loop>…`` with ``DATABASE_URL``,
``REDIS_URL`` and ``DJANGO_SETTINGS_MODULE`` set (``KALENA_ORCHESTRATOR=kubernetes`` for
``publish``, anything else for ``scheduling``). Prints ``holding <loop>`` when a pass is inside
its lock and, at the end, the tasks' outcomes as one JSON line.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path


def main() -> int:
    import django

    django.setup()
    from kalena_web.archive import tasks as archive
    from kalena_web.control import tasks as control
    from kalena_web.kubehooks import tasks as kubehooks
    from kalena_web.replan import tasks as replan
    from kalena_web.scheduling import tasks as scheduling

    cluster_id, release, loops = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]

    def holding(loop: str):
        def hold(*args, **kwargs) -> dict:
            print(f"holding {loop}", flush=True)
            while not release.exists():
                time.sleep(0.05)
            return {}
        return hold

    scheduling.evictions_record = holding("scheduling")      # the first call of each pass
    control.evictions_record = holding("escalation")
    kubehooks.orchestrator_for = lambda cluster: None
    kubehooks.batch_capacity_publish = holding("publish")
    archive.archive_pass = holding("archive")
    replan.drift_pass = holding("drift")
    tasks = {"scheduling": scheduling.schedule, "escalation": control.escalate, "publish": kubehooks.publish,
             "archive": archive.rollup, "drift": replan.drift}
    outcomes: dict[str, dict] = {}

    def run(loop: str) -> None:
        outcomes[loop] = tasks[loop](cluster_id=cluster_id)

    threads = [threading.Thread(target=run, args=(loop,), name=loop) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(outcomes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
