"""The default run's summary is pinned: the 24-h replay of the Irina blueprint with Bitbrains usage
and Alibaba 2018 arrivals (seed 0, every default) gives, field by field and to the last digit, the
summary the replay gave before its inputs were cached and its step loop vectorised
(``data/default-24h-summary.json``, written by ``kalena replay --hours 24 --summary-json`` on
that code, timing fields and input names dropped). A speed-up that changes a decision fails here."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

from kalena_engine.replay import ReplayConfig, build_replay
from kalena_web.cli.inputs import DEFAULTS, load_inputs

PINNED = Path(__file__).parent / "data" / "default-24h-summary.json"


def test_default_24h_summary_is_the_pinned_one(data_dir: Path) -> None:
    args = Namespace(**{k: str(data_dir / v) for k, v in DEFAULTS.items()}, batch_format="auto",
                     machine_ram_gib=None, machine_cores=None)
    summary = build_replay(load_inputs(args, progress=False), ReplayConfig()).run()
    pinned = json.loads(PINNED.read_text())
    got = json.loads(json.dumps(summary, sort_keys=True, default=float))
    assert sorted(got) == sorted(pinned)
    assert {k: got[k] for k in pinned if got[k] != pinned[k]} == {}
    assert got["batch_completed"] == 819_469 and got["batch_evicted"] == 356  # the doc's ×1 figures
