"""The estimator the tests' worked examples are written at.

The asymmetric rule alone — μ 1.15, h 600 s, one margin on every dimension — was the code's
default until the operator's tolerance rule (``kalena evaluate calibrate``) shipped ``auto`` of the
asymmetric rule and the periodic member (docs/evaluation.md). A test whose numbers are that
rule's arithmetic pins it here, so moving the shipped default does not rewrite its example.
"""

from __future__ import annotations

from kalena_engine.policy import EstimatorPolicy, Policy

WORKED_ESTIMATOR = EstimatorPolicy(
    margin_ratio=1.15, half_life_s=600.0, predictor="asymmetric", peak_margin_ratio=None,
    memory_margin_ratio=None, members=("asymmetric", "percentile", "nsigma", "periodic"), over_cost_weight=1.0,
)
WORKED_POLICY = Policy(estimator=WORKED_ESTIMATOR)
