"""Metric 5 from the actions the console stored: the agents' answers to a pressure signal —
a throttle, the cpu weight lowered (its first answer to cpu PSI) or an eviction — with the
agent's own latency; periodic actions are not answers to a signal."""

from __future__ import annotations

import json
import sqlite3


def test_metric5_counts_every_answer_to_a_pressure_signal_cpu_weight_included(tmp_path) -> None:
    from agents.lab.livemetrics import metric5

    db = tmp_path / "kalena.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE inventory_node (id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE telemetry_mitigationevent (id INTEGER PRIMARY KEY, node_id INTEGER, action TEXT,
                                                    trigger_source TEXT, ts REAL, result TEXT);
            INSERT INTO inventory_node VALUES (1, 'n1');
        """)
        rows = [("cpu_weight", "psi-trigger", 10.0, 4.0), ("cpu_weight", "psi-trigger", 11.0, 6.0),
                ("throttle", "poll", 12.0, 20.0), ("evict", "eventfd-threshold", 13.0, 30.0),
                ("throttle", "periodic", 14.0, 1.0),            # not an answer to a signal
                ("cpu_weight", "psi-trigger", 99.0, 1.0)]       # outside the window
        conn.executemany("INSERT INTO telemetry_mitigationevent (node_id, action, trigger_source, ts, result) "
                         "VALUES (1, ?, ?, ?, ?)",
                         [(a, s, ts, json.dumps({"latency_ms": ms})) for a, s, ts, ms in rows])
    out = metric5({"database": {"url": f"sqlite:///{db}"}}, 0.0, 50.0)
    assert out["by_trigger_source"] == {"psi-trigger": 2, "poll": 1, "eventfd-threshold": 1}
    assert out["latency_ms"]["cpu_weight"]["count"] == 2 and out["latency_ms"]["all"]["count"] == 4
    assert out["latency_ms"]["evict"]["values"] == [30.0] and out["latency_ms"]["cpu_weight"]["p50"] == 5.0
