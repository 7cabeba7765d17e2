"""The benchmarks' CPU per thread kind (``kalena bench kubernetes``'s ``thread_cpu_s``): a thread
that ends inside the window still counts, and threads whose ids the system reuses are not
merged into one."""

from __future__ import annotations

import threading
import time

from kalena_web.cli.benchenv import ThreadCpu


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _run(name: str, seconds: float, sampler: ThreadCpu) -> None:
    """A thread named ``name`` that burns ``seconds`` of its own CPU, sampled before it ends."""
    done = threading.Event()

    def body() -> None:
        _burn(seconds)
        done.set()
        time.sleep(0.2)  # alive while the sampler reads it

    t = threading.Thread(target=body, name=name)
    t.start()
    done.wait()
    sampler.sample()
    t.join()


def test_threads_that_end_inside_the_window_are_counted_by_kind() -> None:
    sampler = ThreadCpu()
    for i in range(3):  # one after the other: the system may hand each the previous one's id
        _run(f"kalena-bind-{i}", 0.1, sampler)
    _run("kalena-k8s-events", 0.05, sampler)
    sampler.sample()
    spent = sampler.spent(minimum_s=0.0)
    assert spent["kalena-bind"] >= 0.3 - 1e-3  # three threads' CPU, none lost to a reused id
    assert spent["kalena-k8s-events"] >= 0.05 - 1e-3
    assert list(spent) == sorted(spent, key=lambda k: -spent[k])  # largest first
