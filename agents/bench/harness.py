"""A tiny stand-in for a container runtime on real cgroups, for the benchmark and the tests.

It creates groups under the cgroup v1 ``cpu``, ``cpuacct`` and ``memory`` hierarchies (and the
v2 hierarchy beside them when one is mounted, for per-group PSI), starts real processes inside
them, and removes everything it made. A process joins its groups *before* it runs its program
(a small wrapper writes its own pid into each ``cgroup.procs`` and then ``exec``s), so every page
it allocates is charged to its memory group. This code plays the runtime's part, not the
agent's: the agent never creates groups or starts processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from agents.errors import FacilityUnavailable

HIERARCHIES = ("cpu", "cpuacct", "memory")
_JOIN = ("import os, sys\n"
         "paths = sys.argv[1:sys.argv.index('--')]\n"
         "argv = sys.argv[sys.argv.index('--') + 1:]\n"
         "for p in paths:\n"
         "    with open(p, 'w') as f: f.write(str(os.getpid()))\n"
         "os.execvp(argv[0], argv)\n")

#: A process that spins one cpu while "on"; SIGUSR1 toggles it (starts idle).
SPINNER = ("import signal\n"
           "on = False\n"
           "def flip(*_):\n"
           "    global on\n"
           "    on = not on\n"
           "signal.signal(signal.SIGUSR1, flip)\n"
           "while True:\n"
           "    if on:\n"
           "        pass\n"
           "    else:\n"
           "        signal.pause()\n")
BURNER = "while True: pass"


def memory_hog(mib: int, *, ignore_sigterm: bool = False) -> str:
    """Python source of a process that touches ``mib`` MiB, prints ``ready`` and sleeps."""
    trap = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_sigterm else ""
    return (f"{trap}import sys, time\n"
            f"buf = bytearray({int(mib)} * 1048576)\n"
            f"for i in range(0, len(buf), 4096): buf[i] = 1\n"
            f"print('ready', flush=True)\n"
            f"while True: time.sleep(3600)\n")


class CgroupHarness:
    """Creates groups named ``<prefix>-<random>/<name>`` and processes in them.

    Raises (at construction):
        FacilityUnavailable: the v1 hierarchies are missing or not writable (with the reason).
    """

    def __init__(self, root: str | Path = "/sys/fs/cgroup", prefix: str = "kalena-test", *,
                 cpusets: bool = False) -> None:
        self.root = Path(root)
        self.parent = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.unified = self.root / "unified" if (self.root / "unified" / "cgroup.procs").exists() else None
        #: also make every group in the v1 ``cpuset`` hierarchy (``create(..., cpus=...)`` pins it)
        self.cpusets = cpusets
        if cpusets and not (self.root / "cpuset" / "cgroup.procs").exists():
            raise FacilityUnavailable("cgroup v1", str(self.root / "cpuset"), "hierarchy not mounted")
        self._groups: list[str] = []
        self._procs: list[subprocess.Popen] = []
        self._self_origin: dict[str, str] = {}
        for hierarchy in HIERARCHIES:
            if not (self.root / hierarchy / "cgroup.procs").exists():
                raise FacilityUnavailable("cgroup v1", str(self.root / hierarchy), "hierarchy not mounted")
        try:
            self.create("")
        except OSError as exc:
            raise FacilityUnavailable("cgroup v1", str(self.root), f"cannot create a group: {exc.strerror}") from None

    def rel(self, name: str) -> str:
        """Group path relative to each hierarchy root."""
        return f"{self.parent}/{name}" if name else self.parent

    def dirs(self, name: str) -> list[Path]:
        out = [self.root / h / self.rel(name) for h in HIERARCHIES]
        if self.cpusets:
            out.append(self.root / "cpuset" / self.rel(name))
        if self.unified is not None:
            out.append(self.unified / self.rel(name))
        return out

    def create(self, name: str, *, cpu_shares: int | None = None, cpus: str | None = None) -> str:
        """Make group ``name`` in every hierarchy; ``cpus`` (a cpuset list such as ``"1"``; default:
        the parent's) pins it when the harness was made with ``cpusets=True``."""
        for path in self.dirs(name):
            path.mkdir(exist_ok=True)
        self._groups.append(name)
        if self.cpusets:
            cpuset = self.root / "cpuset" / self.rel(name)
            above = cpuset.parent
            # a new v1 cpuset starts empty and takes no task until both lists are set
            (cpuset / "cpuset.mems").write_text((above / "cpuset.mems").read_text().strip())
            (cpuset / "cpuset.cpus").write_text(cpus or (above / "cpuset.cpus").read_text().strip())
        if cpu_shares is not None:
            (self.root / "cpu" / self.rel(name) / "cpu.shares").write_text(str(cpu_shares))
        return self.rel(name)

    def move(self, pid: int, name: str) -> None:
        for path in self.dirs(name):
            (path / "cgroup.procs").write_text(str(pid))

    def move_self(self, name: str, hierarchies: Sequence[str] = ("cpu", "cpuacct")) -> None:
        """Move this process (all its threads) into group ``name`` of the given hierarchies only,
        remembering where it was (:meth:`cleanup` puts it back)."""
        from agents.cgroups.parse import parse_proc_cgroup

        here = parse_proc_cgroup(Path("/proc/self/cgroup").read_text(), source="/proc/self/cgroup")
        for hierarchy in hierarchies:
            self._self_origin[hierarchy] = here.get(hierarchy, "")
            (self.root / hierarchy / self.rel(name) / "cgroup.procs").write_text(str(os.getpid()))

    def spawn(self, name: str, code: str, *, stdout: int | None = subprocess.DEVNULL) -> subprocess.Popen:
        """Start ``python -c code`` inside group ``name``."""
        return self.spawn_argv(name, [sys.executable, "-c", code], stdout=stdout)

    def spawn_argv(self, name: str, argv: Sequence[str], *, stdout: int | None = subprocess.DEVNULL) -> subprocess.Popen:
        procs = [str(p / "cgroup.procs") for p in self.dirs(name)]
        proc = subprocess.Popen([sys.executable, "-c", _JOIN, *procs, "--", *argv], stdout=stdout,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self._procs.append(proc)
        return proc

    def read(self, hierarchy: str, name: str, filename: str) -> str:
        return (self.root / hierarchy / self.rel(name) / filename).read_text()

    def write(self, hierarchy: str, name: str, filename: str, text: str) -> None:
        (self.root / hierarchy / self.rel(name) / filename).write_text(text)

    def cpu_usage_ns(self, name: str) -> int:
        return int(self.read("cpuacct", name, "cpuacct.usage"))

    def cleanup(self) -> None:
        """Kill every process started here and remove every group, deepest first."""
        for hierarchy, origin in self._self_origin.items():
            try:
                (self.root / hierarchy / origin / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                pass
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                except ProcessLookupError:
                    pass
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for name in sorted(set(self._groups), key=lambda n: -len(self.rel(n).split("/"))):
            for path in self.dirs(name):
                for pid in _pids(path):
                    if pid == os.getpid():
                        continue
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                for _ in range(50):
                    try:
                        path.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)


def _pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []
