"""The policy file (docs/design.md §10): one parser, one mapping each way, every refusal naming the file,
line, key and what is accepted."""

from __future__ import annotations

import json

import pytest

from kalena_engine.errors import PolicyError
from kalena_engine.policy import Policy
from kalena_engine.policy_file import (
    Calibration, CalibrationPoint, PolicyDocument, PolicyMetadata, dump_policy_text, parse_policy_text,
    policy_from_document, policy_to_document,
)
from kalena_engine.resources import CPU, RAM

HEAD = "apiVersion: kalena.naughtian.io/v1\nkind: Policy\n"


def test_defaults_round_trip_through_yaml_and_json() -> None:
    document = PolicyDocument()
    assert parse_policy_text(dump_policy_text(document)) == document
    assert policy_from_document(json.loads(json.dumps(policy_to_document(document)))) == document


def test_every_section_maps_to_the_engine_fields() -> None:
    text = HEAD + """metadata:
  name: aggressive
  version: 3
  created: 2026-12-01T10:00:00Z
  source: calibration sweep
  calibration:
    sweep: {margin_ratio: [1.0, 1.15, 1.3], half_life_s: [600]}
    points:
      - {margin_ratio: 1.0, half_life_s: 600, reclaimed_fraction_cpu: 0.15, reclaimed_fraction_ram: 0.03,
         batch_evictions_per_100_pod_hours: 2.5, production_contention_core_hours: 40}
    knee: {margin_ratio: 1.15, half_life_s: 600}
spec:
  estimator: {margin_ratio: 1.3, half_life_s: 1200, grace_s: 0, limit_ratio: 2}
  eviction: {evict_threshold_ratio: 0.9, cfs_period_us: 50000}
  placement: {weight_image: 0, balance_dims: [cpu, ram, storage], slack_buckets: {cpu: 100}}
  escalation: {evictions: 5, window_s: 600}
  namespaces: {ml: 40, etl: 0}
"""
    document = parse_policy_text(text, source="aggressive.yaml")
    policy = document.policy
    assert policy.estimator.margin_ratio == 1.3 and policy.estimator.half_life_s == 1200.0
    assert policy.estimator.grace_s == 0.0 and policy.estimator.limit_ratio == 2.0
    assert policy.estimator.stale_min_s == 60.0  # omitted: the default
    assert policy.eviction.evict_threshold_ratio == 0.9 and policy.eviction.cfs_period_us == 50_000
    assert policy.placement.weight_image == 0.0 and policy.placement.balance_dims == (CPU, RAM, 3)
    assert policy.placement.slack_buckets[CPU] == 100.0 and policy.placement.slack_buckets[RAM] == 128 * 2**20
    assert policy.escalation.evictions == 5 and policy.escalation.window_s == 600.0
    assert policy.placement.namespace_batch_caps == (("etl", 0), ("ml", 40))
    meta = document.metadata
    assert meta.name == "aggressive" and meta.version == 3 and meta.created.startswith("2026-12-01T10:00:00")
    assert meta.calibration == Calibration(
        sweep=(("margin_ratio", (1.0, 1.15, 1.3)), ("half_life_s", (600.0,))),
        points=(CalibrationPoint(1.0, 600.0, 0.15, 0.03, 2.5, 40.0),),
        knee=(("margin_ratio", 1.15), ("half_life_s", 600.0)))
    assert parse_policy_text(dump_policy_text(document)) == document
    assert document != PolicyDocument(policy=Policy(), metadata=PolicyMetadata())


# (text after the header or whole, expected fragments of the message: "file:line: field: problem (accepted: …)")
REFUSED = {
    "unknown top-level key": (HEAD + "specs: {}\n", ["p.yaml:3: specs: unknown key 'specs'", "apiVersion, kind, metadata, spec"]),
    "unknown section": (HEAD + "spec:\n  estimater: {}\n", ["p.yaml:4: spec.estimater: unknown key", "estimator, eviction, placement, escalation, namespaces"]),
    "unknown field": (HEAD + "spec:\n  estimator:\n    margin: 1.2\n", ["p.yaml:5: spec.estimator.margin: unknown key 'margin'", "margin_ratio, half_life_s, grace_s"]),
    "margin below 1": (HEAD + "spec:\n  estimator:\n    margin_ratio: 0.9\n", ["p.yaml:5: spec.estimator.margin_ratio: 0.9 is out of range", "a number in [1, 10]"]),
    "negative half-life": (HEAD + "spec:\n  estimator: {half_life_s: -5}\n", ["spec.estimator.half_life_s: -5 is out of range", "(0, ∞)"]),
    "threshold above 1": (HEAD + "spec:\n  eviction: {evict_threshold_ratio: 1.2}\n", ["spec.eviction.evict_threshold_ratio: 1.2 is out of range", "(0, 1]"]),
    "text for a number": (HEAD + "spec:\n  estimator: {grace_s: '300'}\n", ["spec.estimator.grace_s: expected a number", "str '300'"]),
    "bool for a number": (HEAD + "spec:\n  escalation: {evictions: true}\n", ["spec.escalation.evictions: expected a whole number", "bool True"]),
    "fractional count": (HEAD + "spec:\n  escalation: {evictions: 2.5}\n", ["spec.escalation.evictions: 2.5 is not a whole number"]),
    "infinite value": (HEAD + "spec:\n  estimator: {half_life_s: .inf}\n", ["spec.estimator.half_life_s: inf is out of range"]),
    "section not a mapping": (HEAD + "spec:\n  eviction: 3\n", ["spec.eviction: expected a mapping, got int 3", "evict_threshold_ratio"]),
    "wrong apiVersion": ("apiVersion: v2\nkind: Policy\n", ["p.yaml:1: apiVersion: 'v2' is not an apiVersion Kalena reads", "kalena.naughtian.io/v1"]),
    "missing kind": ("apiVersion: kalena.naughtian.io/v1\n", ["kind: missing kind", "Policy"]),
    "unknown dimension": (HEAD + "spec:\n  placement: {balance_dims: [cpu, gpus]}\n", ["spec.placement.balance_dims[1]: unknown dimension 'gpus'", "cpu, ram, gpu"]),
    "negative namespace cap": (HEAD + "spec:\n  namespaces: {ml: -1}\n", ["spec.namespaces.ml: -1 is out of range", "a whole number in [0, ∞)"]),
    "acute below threshold": (HEAD + "spec:\n  eviction: {evict_threshold_ratio: 0.98, acute_ratio: 0.96}\n",
                              ["spec.eviction: acute_ratio 0.96 is below evict_threshold_ratio 0.98", "acute_ratio ≥ evict_threshold_ratio"]),
    "engine's own check": (HEAD + "spec:\n  placement: {weight_balance: 0, weight_colocation: 0, weight_image: 0, weight_volatility: 0}\n",
                           ["spec.placement: score weights (0.0, 0.0, 0.0, 0.0) must be ≥ 0 with a positive sum"]),
    "calibration point incomplete": (HEAD + "metadata:\n  calibration:\n    points:\n      - {margin_ratio: 1.1}\n",
                                     ["metadata.calibration.points[0]: missing half_life_s"]),
    "not YAML": (HEAD + "spec: {estimator: [\n", ["p.yaml:", "not valid YAML"]),
    "empty": ("", ["p.yaml: the document is empty"]),
}


@pytest.mark.parametrize("text, fragments", REFUSED.values(), ids=REFUSED.keys())
def test_bad_policy_is_refused_naming_file_line_key_and_accepted(text, fragments) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, source="p.yaml")
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
