"""GenAI 2026 memory utilisation: the reader on the real archive, and production memory taken
from its series in a replay's usage (held between samples, as a fraction of the request)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kalena_engine.errors import TraceError
from kalena_engine.replay.usage import ProductionUsage, with_memory_series
from kalena_engine.resources import RAM, ir_vector
from kalena_engine.traces.genai import load_memory_util


def test_the_real_archive(traces_dir: Path) -> None:
    util = load_memory_util(traces_dir / "alibaba-genai-2026" / "pod_memory_util_anon.tar.gz")
    assert len(util.series) == 208
    for _, t, v in util.series:
        assert np.all(np.diff(t) > 0) and np.all((v >= 0) & (v <= 1.5))
    start = util.earliest_s()
    assert 100 < len(util.covering(start, start + 20 * 3600)) < 208  # most, not all, span 20 h
    assert util.covering(start, start + 30 * 3600) == ()  # nothing spans 30 h: Bitbrains memory stays


def test_memory_series_drive_production_ram(tmp_path: Path) -> None:
    request = np.array([ir_vector(cpu=1, ram=8), ir_vector(cpu=2, ram=4)])
    steps = np.array([0.0, 60.0, 120.0])
    usage = ProductionUsage(mapping="peak", step_times_s=steps, vm_of_pod=np.array([0, 0]), vm_ids=("a",),
                            scale=np.ones((2, 8)), shapes=np.zeros((3, 1, 6)), sample_age_s=np.zeros((3, 1)),
                            rho=np.ones((2, 2)), request=request, limit=request.copy())
    series = (("c", np.array([1000.0, 1090.0]), np.array([0.5, 0.25])),)
    out = with_memory_series(usage, series, series_start_s=1000.0, rng=np.random.default_rng(0))
    ram = [out.usage_at(s)[:, RAM] for s in range(3)]
    assert np.allclose(ram[0], 0.5 * request[:, RAM]) and np.allclose(ram[1], 0.5 * request[:, RAM])  # held
    assert np.allclose(ram[2], 0.25 * request[:, RAM])
    assert np.all(usage.shapes == 0)  # the input is not modified
    with pytest.raises(ValueError, match="no memory-utilisation series"):
        with_memory_series(usage, (), series_start_s=0.0, rng=np.random.default_rng(0))


def test_a_missing_or_unreadable_archive_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="file not found"):
        load_memory_util(tmp_path / "nope.tar.gz")
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(TraceError, match="not a readable tar.gz") as err:
        load_memory_util(bad)
    assert "bad.tar.gz" in str(err.value)
