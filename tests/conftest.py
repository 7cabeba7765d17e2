"""Shared fixtures: where the real data sets live.

Data paths resolve to ``../shared/data`` beside the project root; ``KALENA_DATA_DIR``
overrides. A test that needs a data set and cannot find it fails loudly (never skips).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def data_root() -> Path:
    return Path(os.environ.get("KALENA_DATA_DIR") or PROJECT_ROOT.parent / "shared" / "data")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    root = data_root()
    if not root.is_dir():
        pytest.fail(f"data directory {root} not found; set KALENA_DATA_DIR to the shared data folder")
    return root


@pytest.fixture(scope="session")
def kuberina_dir(data_dir: Path) -> Path:
    return data_dir / "kuberina"


@pytest.fixture(scope="session")
def traces_dir(data_dir: Path) -> Path:
    return data_dir / "traces"
