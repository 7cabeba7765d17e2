"""Pressure signals: PSI triggers (``poll(POLLPRI)``), cgroup v1 memory thresholds via eventfd,
and the polling fallback. Every event says which mechanism produced it: ``psi-trigger``,
``eventfd-threshold`` or ``poll``."""

from agents.pressure.events import SOURCE_EVENTFD, SOURCE_POLL, SOURCE_PSI, PressureEvent
from agents.pressure.monitor import MemoryThreshold, PressureMonitor, PsiTrigger

__all__ = ["MemoryThreshold", "PressureEvent", "PressureMonitor", "PsiTrigger", "SOURCE_EVENTFD",
           "SOURCE_POLL", "SOURCE_PSI"]
