"""The parsed-input cache: keyed by the files' content and the readers' version, shared by every
command that loads inputs, an optimisation only (deleting it changes no figure)."""

from __future__ import annotations

import gzip
import pickle
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from kalena_engine.errors import TraceError
from kalena_engine.replay import ReplayConfig, build_replay
from kalena_web.cli import input_cache
from kalena_web.cli.inputs import DEFAULTS, input_files, load_inputs


def namespace(data_dir: Path, **overrides) -> Namespace:
    values = {k: str(data_dir / v) for k, v in DEFAULTS.items()}
    values.update(overrides)
    return Namespace(**values, batch_format="auto", machine_ram_gib=None, machine_cores=None)


@pytest.fixture()
def state(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KALENA_VAR_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(input_cache.CACHE_ENV, raising=False)
    return tmp_path / "state"


def entries(state: Path) -> list[Path]:
    folder = state / "cache" / "replay-inputs"
    return sorted(folder.glob("*.pickle")) if folder.is_dir() else []


def test_cached_inputs_give_the_same_replay_and_deleting_the_cache_changes_nothing(data_dir, state) -> None:
    args = namespace(data_dir)
    fresh = load_inputs(Namespace(**vars(args), no_input_cache=True), progress=False)
    assert entries(state) == []                      # --no-input-cache writes nothing
    first = load_inputs(args, progress=False)        # a miss: read and stored
    assert len(entries(state)) == 1
    again = load_inputs(args, progress=False)        # a hit: the stored entry
    assert again is not first
    for a, b in zip(fresh.bitbrains.series[::25], again.bitbrains.series[::25], strict=True):
        np.testing.assert_array_equal(a.cpu_usage_mhz, b.cpu_usage_mhz)
    np.testing.assert_array_equal(fresh.batch.request, again.batch.request)
    assert fresh.anomalies == again.anomalies
    config = ReplayConfig(hours=1.0)
    from_cache = build_replay(again, config).run()
    entries(state)[0].unlink()                       # delete the cache: the same figures
    assert build_replay(load_inputs(args, progress=False), config).run() == from_cache
    assert build_replay(fresh, config).run() == from_cache


def test_the_key_follows_content_and_reader_version(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "series"
    folder.mkdir()
    (folder / "1.csv.gz").write_bytes(gzip.compress(b"a"))
    trace = tmp_path / "batch.csv.gz"
    trace.write_bytes(gzip.compress(b"rows"))
    files = [("usage_dir", folder), ("batch_trace", trace)]
    key = input_cache.input_key(files, {"cluster": "irina"})
    trace.touch()                                    # same bytes, newer time: same key
    assert input_cache.input_key(files, {"cluster": "irina"}) == key
    trace.write_bytes(gzip.compress(b"rows2"))       # one changed file: another key
    changed = input_cache.input_key(files, {"cluster": "irina"})
    assert changed != key
    (folder / "2.csv.gz").write_bytes(gzip.compress(b"b"))  # a file added to the folder
    assert input_cache.input_key(files, {"cluster": "irina"}) != changed
    assert input_cache.input_key(files, {"cluster": "alibaba-gpu-2023"}) != input_cache.input_key(files, {"cluster": "irina"})
    before = input_cache.input_key(files, {})
    monkeypatch.setattr(input_cache, "READER_VERSION", "another")  # a reader's version changes
    assert input_cache.input_key(files, {}) != before


def test_a_changed_input_file_is_read_again(data_dir, state, tmp_path) -> None:
    trace = tmp_path / "batch_task.csv.gz"
    original = (data_dir / DEFAULTS["batch_trace"]).read_bytes()
    trace.write_bytes(original)
    first = load_inputs(namespace(data_dir, batch_trace=str(trace)), progress=False)
    lines = gzip.decompress(original).splitlines(keepends=True)
    trace.write_bytes(gzip.compress(b"".join(lines[:1001])))  # the header and the first 1,000 rows
    second = load_inputs(namespace(data_dir, batch_trace=str(trace)), progress=False)
    assert len(entries(state)) == 2
    assert len(second.batch.task_id) < len(first.batch.task_id)


def test_an_unreadable_entry_is_rebuilt_and_bad_input_still_raises(data_dir, state, tmp_path) -> None:
    args = namespace(data_dir)
    load_inputs(args, progress=False)
    [entry] = entries(state)
    entry.write_bytes(b"not a pickle")
    rebuilt = load_inputs(args, progress=False)
    assert rebuilt.workloads is not None
    assert pickle.loads(entry.read_bytes()).anomalies == rebuilt.anomalies  # rewritten whole
    bad = tmp_path / "task_events.csv.gz"
    bad.write_bytes(b"not gzip")
    for _ in range(2):  # an error is never cached: the second load raises the same
        with pytest.raises(TraceError, match="not a gzip file") as caught:
            load_inputs(namespace(data_dir, google_events=str(bad)), progress=False)
        assert str(bad) in str(caught.value)
    assert len(entries(state)) == 1


def test_every_input_file_is_in_the_key(data_dir) -> None:
    roles = [role for role, _ in input_files(namespace(data_dir))]
    assert roles == ["infra", "workloads", "blueprint", "usage_dir", "google_events", "google_usage", "batch_trace"]
    gpu = [role for role, _ in input_files(namespace(data_dir, cluster="alibaba-gpu-2023"))]
    assert gpu == ["cluster", "memory", "usage_dir", "google_events", "google_usage"]


def test_the_state_folder_is_the_consoles(monkeypatch, tmp_path) -> None:
    from kalena_web import settings

    assert input_cache.state_dir() == settings.VAR_DIR
    monkeypatch.setenv("KALENA_VAR_DIR", str(tmp_path))
    assert input_cache.cache_dir() == tmp_path / "cache" / "replay-inputs"


def test_only_the_most_recently_used_entries_are_kept(state, monkeypatch) -> None:
    monkeypatch.setattr(input_cache, "KEEP_ENTRIES", 2)
    for key in ("a", "b", "c"):
        assert input_cache.cached(key, lambda k=key: {"value": k}) == ({"value": key}, "miss")
    kept = sorted(p.stem for p in entries(state))
    assert kept == ["b", "c"]
    assert input_cache.cached("b", lambda: {"value": "rebuilt"}) == ({"value": "b"}, "hit")
    monkeypatch.setenv(input_cache.CACHE_ENV, "0")
    assert input_cache.cached("b", lambda: {"value": "fresh"}) == ({"value": "fresh"}, "off")
