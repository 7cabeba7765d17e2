"""cgroup v1/v2 backends (paths, reads, write formats) and pure parsers of cgroup files."""

from agents.cgroups.backend import CgroupFs, CgroupV1, CgroupV2, RawStats, detect

__all__ = ["CgroupFs", "CgroupV1", "CgroupV2", "RawStats", "detect"]
