"""Collectors: code that only reads telemetry (cgroup files, PSI, Docker stats, cAdvisor,
kubelet) and turns it into :class:`~agents.model.UsageSample` in internal units. Every
parser is a pure function of its input text/document; the I/O wrappers are separate."""
