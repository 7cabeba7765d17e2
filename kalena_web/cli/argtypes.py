"""Argument types for the command line: numbers checked where they are parsed, so a bad value
stops the command at once (argparse: exit 2, naming the flag) instead of after the inputs load."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(*, minimum: float = -math.inf, exclusive: bool = False, integer: bool = False) -> Callable[[str], float]:
    """A parser for a finite number ≥ ``minimum`` (> with ``exclusive``), optionally a whole one."""
    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if integer else 'a number'}") from None
        if not math.isfinite(value) or value < minimum or (exclusive and value == minimum):
            bound = f"> {minimum:g}" if exclusive else f"≥ {minimum:g}"
            raise argparse.ArgumentTypeError(f"{text} is not a finite number {bound}")
        return value
    return parse


POSITIVE = number(minimum=0.0, exclusive=True)
NON_NEGATIVE = number(minimum=0.0)
SEED = number(minimum=0, integer=True)


def port(text: str) -> int:
    """A TCP port, 1–65535."""
    value = number(minimum=1, integer=True)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (1–65535)")
    return int(value)
