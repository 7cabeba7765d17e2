"""Event-driven pressure sources and the poll() loop that waits on them.

**PSI triggers** (``Documentation/accounting/psi.rst``): open ``/proc/pressure/<res>`` or a
cgroup's ``<res>.pressure`` ``O_RDWR|O_NONBLOCK``, write ``"<some|full> <threshold µs> <window
µs>\\0"`` (NUL-terminated), then ``poll()`` for ``POLLPRI``. One long-lived trigger per file
descriptor; unprivileged triggers (no ``CAP_SYS_RESOURCE``) need a window that is a multiple of
2 s and are evaluated on the kernel's 2 s averaging tick. A fresh trigger can fire spuriously, so
the first event of each trigger is ignored (counted in :attr:`PsiTrigger.ignored`). ``POLLERR``
means the group was removed: the trigger is dropped.

Two kernel behaviours shape how the agent uses unprivileged triggers (measured on 6.18):

* reading a group's pressure file (any of ``cpu``/``memory``/``io.pressure``) folds the group's
  averages, and the averaging work then skips the trigger check — a group read every second
  never fires its trigger. The collector therefore never reads the PSI files of a group with an
  armed trigger, and a contention mark set by a trigger is released by the *absence* of further
  events (two windows and a tick), not by reading the file;
* a trigger that sees stall within its first window after being armed may never fire; triggers
  are long-lived (armed when a service is discovered), so this costs at most its first episode.

**eventfd thresholds** (cgroup v1 ``Documentation/admin-guide/cgroup-v1/memory.rst`` §9): write
``"<eventfd> <fd of memory.usage_in_bytes> <threshold>"`` to ``cgroup.event_control``; the
eventfd becomes readable whenever usage crosses the threshold in either direction, so the
handler reads the usage and reports an event only when it is at or above the threshold.

The registration writes go through :class:`~agents.enforcer.Enforcer` (``arm_psi_trigger``,
``arm_memory_threshold``), the only code that writes kernel files.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agents.pressure.events import SOURCE_EVENTFD, SOURCE_PSI, PressureEvent


class Arming(Protocol):
    """What the sources need from the enforcer."""

    def arm_psi_trigger(self, path: Path, stall: str, threshold_us: int, window_us: int) -> int: ...

    def arm_memory_threshold(self, usage_file: Path, event_control: Path, threshold_bytes: int) -> tuple[int, int]: ...


class PsiTrigger:
    """One PSI trigger on one pressure file (module docstring).

    Args:
        path: ``/proc/pressure/cpu`` or ``<group>/cpu.pressure`` …
        resource: ``cpu`` | ``memory`` | ``io``.
        scope: ``node`` or a workload id.
        stall: ``some`` or ``full``.
        threshold_us, window_us: the trigger; window a multiple of 2 s where the kernel demands it.
        arm: the enforcer.

    Raises:
        OSError: the kernel refused the trigger (``EINVAL`` for a bad window, ``ENOENT`` without
            PSI, ``EPERM``/``EACCES``) — the caller falls back to polling.
    """

    source = SOURCE_PSI

    def __init__(self, path: Path, *, resource: str, scope: str, stall: str, threshold_us: int,
                 window_us: int, arm: Arming) -> None:
        self.path = Path(path)
        self.resource = resource
        self.scope = scope
        self.stall = stall
        self.threshold_us = int(threshold_us)
        self.window_us = int(window_us)
        self.fd = arm.arm_psi_trigger(self.path, stall, self.threshold_us, self.window_us)
        self.armed_mono = time.monotonic()
        self.events = 0
        self.ignored = 0
        self.broken = False

    def fileno(self) -> int:
        return self.fd

    @property
    def poll_mask(self) -> int:
        return select.POLLPRI

    def handle(self, revents: int, now_mono: float, now_s: float) -> PressureEvent | None:
        if revents & (select.POLLERR | select.POLLNVAL):
            self.broken = True
            return None
        if not revents & select.POLLPRI:
            return None
        self.events += 1
        if self.events == 1:
            self.ignored += 1
            return None
        return PressureEvent(SOURCE_PSI, self.resource, self.scope, now_mono, now_s, {
            "stall": self.stall, "threshold_us": self.threshold_us, "window_us": self.window_us,
            "path": str(self.path)})

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class MemoryThreshold:
    """An eventfd threshold on a v1 group's ``memory.usage_in_bytes`` (module docstring)."""

    source = SOURCE_EVENTFD

    def __init__(self, usage_file: Path, event_control: Path, threshold_bytes: int, *, scope: str,
                 arm: Arming) -> None:
        self.usage_file = Path(usage_file)
        self.threshold_bytes = int(threshold_bytes)
        self.scope = scope
        self.resource = "memory"
        self.fd, self._usage_fd = arm.arm_memory_threshold(self.usage_file, Path(event_control), self.threshold_bytes)
        self.events = 0
        self.broken = False

    def fileno(self) -> int:
        return self.fd

    @property
    def poll_mask(self) -> int:
        return select.POLLIN

    def handle(self, revents: int, now_mono: float, now_s: float) -> PressureEvent | None:
        if revents & (select.POLLERR | select.POLLNVAL | select.POLLHUP):
            self.broken = True
            return None
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            return None
        try:
            usage = int(self.usage_file.read_text().strip())
        except (OSError, ValueError):
            self.broken = True
            return None
        if usage < self.threshold_bytes:
            return None
        self.events += 1
        return PressureEvent(SOURCE_EVENTFD, "memory", self.scope, now_mono, now_s,
                             {"threshold_bytes": self.threshold_bytes, "usage_bytes": usage})

    def close(self) -> None:
        for fd in (self.fd, self._usage_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self._usage_fd = -1


Source = PsiTrigger | MemoryThreshold


class PressureMonitor:
    """Waits on every armed source and a wake-up pipe with one ``poll()``.

    ``wait(timeout_s)`` returns the events that arrived (possibly none, on timeout or wake-up).
    Sources are keyed so that per-workload triggers can be replaced or dropped as workloads come
    and go.
    """

    def __init__(self, clock_mono: Callable[[], float] = time.monotonic, clock_s: Callable[[], float] = time.time) -> None:
        self._poll = select.poll()
        self._sources: dict[str, Source] = {}
        self._by_fd: dict[int, str] = {}
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poll.register(self._wake_r, select.POLLIN)
        self.clock_mono = clock_mono
        self.clock_s = clock_s

    def add(self, key: str, source: Source) -> None:
        self.remove(key)
        self._sources[key] = source
        self._by_fd[source.fileno()] = key
        self._poll.register(source.fileno(), source.poll_mask)

    def remove(self, key: str) -> None:
        source = self._sources.pop(key, None)
        if source is None:
            return
        fd = source.fileno()
        if fd >= 0:
            self._by_fd.pop(fd, None)
            try:
                self._poll.unregister(fd)
            except KeyError:
                pass
        source.close()

    def keys(self) -> list[str]:
        return list(self._sources)

    def get(self, key: str) -> Source | None:
        return self._sources.get(key)

    def sources(self) -> dict[str, Source]:
        return dict(self._sources)

    def wake(self) -> None:
        """Make a blocked :meth:`wait` return now (shutdown, policy update)."""
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    def wait(self, timeout_s: float) -> list[PressureEvent]:
        ready = self._poll.poll(max(0.0, timeout_s) * 1000.0)
        now_mono, now_s = self.clock_mono(), self.clock_s()
        events: list[PressureEvent] = []
        for fd, revents in ready:
            if fd == self._wake_r:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
                continue
            key = self._by_fd.get(fd)
            if key is None:
                continue
            source = self._sources[key]
            event = source.handle(revents, now_mono, now_s)
            if source.broken:
                self.remove(key)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> None:
        for key in list(self._sources):
            self.remove(key)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
