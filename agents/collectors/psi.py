"""Pressure stall information (PSI): parsing separate from reading.

Format (``Documentation/accounting/psi.rst``), for ``/proc/pressure/{cpu,memory,io}`` and a
cgroup v2 group's ``{cpu,memory,io}.pressure``::

    some avg10=0.00 avg60=0.00 avg300=0.00 total=0
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

``avg*`` are percentages of wall time (0–100) over 10/60/300 s, ``total`` the cumulative stall
time in µs. Older kernels omit the ``full`` line for cpu; it then reads as ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agents.errors import TelemetryError

_KEYS = ("avg10", "avg60", "avg300", "total")


@dataclass(frozen=True)
class PsiLine:
    """One ``some``/``full`` line: averages in percent (0–100), ``total_us`` cumulative µs."""

    avg10_pct: float
    avg60_pct: float
    avg300_pct: float
    total_us: int


@dataclass(frozen=True)
class PsiStats:
    """A whole PSI file: ``some`` always, ``full`` where the kernel reports it."""

    some: PsiLine
    full: PsiLine | None = None

    def as_dict(self) -> dict[str, dict[str, float] | None]:
        """JSON shape used by the link protocol: ``{"some": {"avg10": …, "avg60": …, "avg300": …,
        "total_us": …}, "full": {…} | None}``."""
        def line(x: PsiLine | None) -> dict[str, float] | None:
            if x is None:
                return None
            return {"avg10": x.avg10_pct, "avg60": x.avg60_pct, "avg300": x.avg300_pct, "total_us": x.total_us}
        return {"some": line(self.some), "full": line(self.full)}


def parse_psi(text: str, *, source: str = "<psi>") -> PsiStats:
    """Parse the text of a PSI file.

    Raises:
        TelemetryError: naming ``source`` and the line, if a line is not ``some|full`` followed
            by ``avg10= avg60= avg300= total=`` or if ``some`` is missing.

    Example: ``parse_psi("some avg10=1.50 avg60=0.20 avg300=0.00 total=1234\\n").some.avg10_pct``
    is ``1.5``.
    """
    lines: dict[str, PsiLine] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        raw = raw.strip()
        if not raw:
            continue
        kind, _, rest = raw.partition(" ")
        if kind not in ("some", "full"):
            raise TelemetryError(f"unexpected line {raw!r}", source=source, line=number,
                                 accepted="lines starting with 'some' or 'full'")
        fields: dict[str, str] = {}
        for token in rest.split():
            key, eq, value = token.partition("=")
            if not eq:
                raise TelemetryError(f"token {token!r} is not key=value", source=source, line=number)
            fields[key] = value
        try:
            lines[kind] = PsiLine(float(fields["avg10"]), float(fields["avg60"]),
                                  float(fields["avg300"]), int(fields["total"]))
        except KeyError as exc:
            raise TelemetryError(f"missing {exc.args[0]}", source=source, line=number,
                                 accepted="avg10=, avg60=, avg300=, total=") from None
        except ValueError:
            raise TelemetryError(f"non-numeric value in {raw!r}", source=source, line=number) from None
    if "some" not in lines:
        raise TelemetryError("no 'some' line", source=source)
    return PsiStats(some=lines["some"], full=lines.get("full"))


def read_psi(path: str | Path) -> PsiStats:
    """Read and parse one PSI file.

    Raises:
        OSError: if the file cannot be read (missing PSI support, vanished cgroup).
        TelemetryError: if its content is malformed.
    """
    path = Path(path)
    return parse_psi(path.read_text(), source=str(path))
