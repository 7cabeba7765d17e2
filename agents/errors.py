"""The agent's exception tree.

Every message says what was wrong and where (setting, file, field, URL, cgroup or workload),
and where a fixed set of values is acceptable, what would have been accepted. Errors about
input (configuration, telemetry, link messages) reuse the engine's
:class:`~kalena_engine.errors.InputError` rendering: ``<source>[:line]: <field>: <problem>
(accepted: …)``.
"""

from __future__ import annotations

from kalena_engine.errors import InputError, KalenaError


class AgentError(KalenaError):
    """Base of every error the agent raises on purpose."""


class ConfigError(InputError, AgentError):
    """A flag, environment variable, policy file or workloads file could not be used.

    ``source`` names the flag/variable/file, ``field`` the setting.
    """


class TelemetryError(InputError, AgentError):
    """A telemetry file or document (cgroup file, PSI file, Docker/cAdvisor/kubelet JSON) is
    malformed. ``source`` is the path or URL, ``field`` the offending key or line."""


class DiscoveryError(InputError, AgentError):
    """Workload metadata (labels, annotations, resources) is malformed; ``source`` names the
    workload (``docker:<id>``, ``kubelet:<ns>/<pod>``, ``file:<path>``)."""


class ProtocolError(InputError, AgentError):
    """A link message does not follow :mod:`agents.link.protocol`."""


class FacilityUnavailable(AgentError):
    """A kernel or runtime facility the agent was asked to use is missing (cgroup hierarchy,
    PSI, eventfd thresholds, Docker socket). The message names the facility, the path or
    address tried and the reason."""

    def __init__(self, facility: str, where: str, reason: str) -> None:
        self.facility = facility
        self.where = where
        self.reason = reason
        super().__init__(f"{facility} unavailable at {where}: {reason}")
