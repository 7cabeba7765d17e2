"""Readers for ``kalena-agent bench interference``: per-thread scheduling delay, node cpu
utilisation, the service and the load generator's log. Each reads only the kernel's files or the
files the benchmark itself made.

Kernel facts this relies on (6.18 here, measured): ``/proc/<pid>/task/<tid>/schedstat`` is
``<cpu time ns> <run-queue wait ns> <timeslices>`` (CONFIG_SCHED_INFO; present with
``kernel.sched_schedstats = 0``, which this benchmark leaves alone); ``/proc/<pid>/sched``'s
``wait_max`` needs ``sched_schedstats = 1`` (a machine-wide switch) and no tracefs is mounted, so
individual waits are not visible: the wait is sampled as deltas every ``interval_s``
(:func:`agents.bench.interference_stats.classify_interval` says how an interval is judged).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: an HTTP/1.1 server (keep-alive, one thread per connection) answering ``GET /`` with a fixed
#: amount of pure-python cpu work; argv: port, work iterations. Prints ``ready`` once listening.
HTTP_SERVICE = (
    "import sys\n"
    "from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer\n"
    "PORT, WORK = int(sys.argv[1]), int(sys.argv[2])\n"
    "class H(BaseHTTPRequestHandler):\n"
    "    protocol_version = 'HTTP/1.1'\n"
    "    def do_GET(self):\n"
    "        x = 0\n"
    "        for i in range(WORK):\n"
    "            x = (x + i * i) % 1000003\n"
    "        body = b'%d\\n' % x\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "ThreadingHTTPServer.daemon_threads = True\n"
    "ThreadingHTTPServer.request_queue_size = 128\n"
    "srv = ThreadingHTTPServer(('127.0.0.1', PORT), H)\n"
    "print('ready', flush=True)\n"
    "srv.serve_forever()\n")


def read_cpu_jiffies(cpus: list[int], proc_root: str = "/proc") -> tuple[int, int]:
    """``(busy, total)`` jiffies summed over ``cpus`` from ``/proc/stat`` (busy = total − idle − iowait)."""
    busy = total = 0
    wanted = {f"cpu{c}" for c in cpus}
    for line in Path(proc_root, "stat").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in wanted:
            values = [int(v) for v in parts[1:9]]
            t = sum(values)
            total += t
            busy += t - values[3] - values[4]
    return busy, total


@dataclass
class ArmSamples:
    """What the sampler saw during one arm (monotonic times, s)."""

    #: per thread-interval: midpoint, cpu ns, wait ns, timeslices
    sched: list[tuple[float, int, int, int]] = field(default_factory=list)
    #: per utilisation window: start, end, node cpus' busy %, the part of it not spent by the
    #: benchmark's groups (the machine's other load), %
    util: list[tuple[float, float, float, float]] = field(default_factory=list)
    #: length of every schedstat sampling interval, s (the measure's real resolution)
    gaps: list[float] = field(default_factory=list)

    def util_at(self, t: float) -> float | None:
        """Node utilisation (%) of the window containing ``t`` — or, for the last partial second of
        an arm (no window closed there yet), of the nearest window; ``None`` with no window."""
        if not self.util:
            return None
        starts = [w[0] for w in self.util]
        i = int(np.searchsorted(starts, t, side="right")) - 1
        if 0 <= i < len(self.util) and self.util[i][0] <= t <= self.util[i][1]:
            return self.util[i][2]
        nearest = min(self.util, key=lambda w: min(abs(t - w[0]), abs(t - w[1])))
        return nearest[2]


class Sampler(threading.Thread):
    """Samples the service's threads' schedstat every ``interval_s`` and the node cpus'
    utilisation (plus how much of it was the benchmark's own groups) every ``util_window_s``.

    ``group_usage_ns`` returns the cumulative cpu ns of the benchmark's service and batch groups
    together, so ``other_pct`` — the node cpus' busy share not spent by them — is the machine's
    own load on the node cpus, recorded beside each arm.
    """

    def __init__(self, service_pid: int, node_cpus: list[int], group_usage_ns, *, interval_s: float = 0.01,
                 util_window_s: float = 1.0, proc_root: str = "/proc") -> None:
        super().__init__(daemon=True, name="interference-sampler")
        self.pid, self.node_cpus, self.group_usage_ns = service_pid, node_cpus, group_usage_ns
        self.interval_s, self.util_window_s, self.proc_root = interval_s, util_window_s, proc_root
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.current: ArmSamples | None = None
        self.errors: list[str] = []
        self._prev: dict[int, tuple[int, int, int]] = {}
        self._hz = os.sysconf("SC_CLK_TCK")

    def begin(self) -> None:
        with self.lock:
            self.current = ArmSamples()

    def end(self) -> ArmSamples:
        with self.lock:
            out, self.current = self.current or ArmSamples(), None
        return out

    def _threads(self) -> dict[int, tuple[int, int, int]]:
        out = {}
        base = Path(self.proc_root, str(self.pid), "task")
        try:
            tids = os.listdir(base)
        except OSError as exc:
            self.errors.append(f"{base}: {exc.strerror}")
            return out
        for tid in tids:
            try:
                cpu, wait, slices = (int(v) for v in (base / tid / "schedstat").read_text().split()[:3])
            except (OSError, ValueError):
                continue  # the thread ended between listdir and read
            out[int(tid)] = (cpu, wait, slices)
        return out

    def run(self) -> None:
        prev_t = time.monotonic()
        self._prev = self._threads()
        util_t = prev_t
        util_prev = read_cpu_jiffies(self.node_cpus, self.proc_root)
        groups_prev = self.group_usage_ns()
        while not self.stop.is_set():
            time.sleep(self.interval_s)
            now = time.monotonic()
            threads = self._threads()
            mid = (prev_t + now) / 2
            rows = []
            for tid, (cpu, wait, slices) in threads.items():
                before = self._prev.get(tid, (0, 0, 0))  # a new thread: its whole life is in this interval
                rows.append((mid, cpu - before[0], wait - before[1], slices - before[2]))
            self._prev, prev_t = threads, now
            if now - util_t >= self.util_window_s:
                jiffies = read_cpu_jiffies(self.node_cpus, self.proc_root)
                groups = self.group_usage_ns()
                d_total = jiffies[1] - util_prev[1]
                busy_pct = 100.0 * (jiffies[0] - util_prev[0]) / d_total if d_total > 0 else 0.0
                span_ns = (now - util_t) * 1e9 * len(self.node_cpus)
                ours_pct = 100.0 * (groups - groups_prev) / span_ns if span_ns > 0 else 0.0
                window = (util_t, now, min(100.0, busy_pct), max(0.0, min(100.0, busy_pct) - ours_pct))
                util_t, util_prev, groups_prev = now, jiffies, groups
            else:
                window = None
            with self.lock:
                if self.current is not None:
                    self.current.sched.extend(r for r in rows if r[1] > 0 or r[2] > 0)
                    self.current.gaps.append(now - (2 * mid - now))
                    if window is not None:
                        self.current.util.append(window)


def read_h2load_log(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """h2load ``--log-file``: ``start µs since epoch \\t status \\t µs to end of response`` per
    request → ``(start_s, status, latency_ms)`` arrays. A malformed row raises ``ValueError``
    naming the file and line."""
    starts, statuses, latencies = [], [], []
    text = path.read_text() if path.exists() else ""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        try:
            starts.append(int(parts[0]) / 1e6)
            statuses.append(int(parts[1]))
            latencies.append(int(parts[2]) / 1e3)
        except (IndexError, ValueError):
            raise ValueError(f"{path}:{number}: not an h2load log row: {line!r}") from None
    return np.array(starts), np.array(statuses, dtype=int), np.array(latencies)


def parse_h2load_requests(stdout: str) -> dict[str, int]:
    """The ``requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout``
    line of h2load's summary → a dict (empty when absent)."""
    for line in stdout.splitlines():
        if line.startswith("requests:"):
            out = {}
            for item in line[len("requests:"):].split(","):
                number, _, name = item.strip().partition(" ")
                if number.isdigit():
                    out[name.strip()] = int(number)
            return out
    return {}
