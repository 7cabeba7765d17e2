"""Run independent pieces of work in forked processes, at most ``jobs`` at a time, with a
progress bar each — the machinery of every ``kalena evaluate`` subcommand.

The parent's loaded inputs are inherited by each fork (not pickled); each child sends back
progress counts and one picklable result. Memory is bounded by ``jobs`` children. The
results do not depend on ``jobs`` (each piece of work is self-contained and seeded).
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import signal
import traceback
from collections.abc import Callable

from tqdm import tqdm

#: ``work(report)`` → result; ``report(done)`` sets the piece's progress count.
Work = Callable[[Callable[[int], None]], object]


def _child(name: str, work: Work, results, parent_pid: int) -> None:
    """Child process: run one piece of work, reporting progress and the result; it stops by
    itself if the command that started it is gone."""
    try:
        def report(done: int) -> None:
            if os.getppid() != parent_pid:  # orphaned: nobody will read the result
                os._exit(3)
            results.put(("progress", name, done))

        results.put(("done", name, work(report)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the command
        results.put(("failed", name, traceback.format_exc()))


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def run_parallel(work: dict[str, Work], totals: dict[str, int | None], *, jobs: int, progress: bool = True,
                 unit: str = "step", what: str = "policy") -> dict[str, object]:
    """Run every piece of ``work``, at most ``jobs`` at once in forked processes; returns
    ``{name: result}`` in ``work`` order. ``totals`` gives each bar's length (None: open-ended).

    Raises:
        RuntimeError: a piece's process failed (its traceback in the message) or died.
    """
    context = multiprocessing.get_context("fork")
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a terminated command stops its children too
    results = context.Queue()
    waiting = list(work)
    running: dict[str, multiprocessing.Process] = {}
    done: dict[str, object] = {}
    width = max((len(n) for n in work), default=1)
    bars = {name: tqdm(total=totals.get(name), desc=f"{name:>{width}}", unit=unit, position=i,
                       disable=not progress, leave=True)
            for i, name in enumerate(work)}
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                name = waiting.pop(0)
                process = context.Process(target=_child, args=(name, work[name], results, os.getpid()), daemon=True)
                process.start()
                running[name] = process
            try:
                kind, name, payload = results.get(timeout=5.0)
            except queue_module.Empty:
                for name, process in list(running.items()):
                    if not process.is_alive() and name not in done:
                        raise RuntimeError(f"{what} {name}: its process died (exit code {process.exitcode})")
                continue
            if kind == "progress":
                bars[name].n = payload
                bars[name].refresh()
            elif kind == "failed":
                raise RuntimeError(f"{what} {name} failed:\n{payload}")
            else:
                done[name] = payload
                if totals.get(name) is not None:
                    bars[name].n = totals[name]
                bars[name].refresh()
                running.pop(name).join()
    finally:
        signal.signal(signal.SIGTERM, previous)
        for process in running.values():
            process.terminate()
            process.join()
        for bar in bars.values():
            bar.close()
    return {name: done[name] for name in work}
