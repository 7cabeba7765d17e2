"""Where the command line finds data: ``$KALENA_DATA_DIR`` or ``../shared/data`` beside the
project root."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DATA_ENV = "KALENA_DATA_DIR"


def data_root() -> Path:
    """The data folder: ``$KALENA_DATA_DIR`` if set, else ``<project>/../shared/data``."""
    override = os.environ.get(DATA_ENV)
    return Path(override) if override else PROJECT_ROOT.parent / "shared" / "data"


def data_path(relative: str) -> Path:
    """``relative`` under :func:`data_root` (an absolute path is returned unchanged)."""
    path = Path(relative)
    return path if path.is_absolute() else data_root() / path
