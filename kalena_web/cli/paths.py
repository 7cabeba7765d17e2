"""Where the command line finds data: ``$KALENA_DATA_DIR``, else ``../shared/data`` beside the
project root, else the bundled demo sample (``sample-data/``, see its README)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DATA_ENV = "KALENA_DATA_DIR"
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
SAMPLE_DATA = PROJECT_ROOT / "sample-data"


def data_root() -> Path:
    """The data folder: ``$KALENA_DATA_DIR`` if set; else ``<project>/../shared/data`` if it
    exists; else the bundled sample."""
    override = os.environ.get(DATA_ENV)
    if override:
        return Path(override)
    if SHARED_DATA.is_dir() or not SAMPLE_DATA.is_dir():
        return SHARED_DATA
    return SAMPLE_DATA


def data_path(relative: str) -> Path:
    """``relative`` under :func:`data_root` (an absolute path is returned unchanged)."""
    path = Path(relative)
    return path if path.is_absolute() else data_root() / path

