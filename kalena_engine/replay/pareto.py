"""The Pareto-reserve sweep (proposal §5.2 and metric 10): Kuberina's ``--pareto P`` packs
production against ``P`` % of each node's capacity, keeping ``100 − P`` % as burst reserve;
the verdict (and the replay) use the real capacity. With reclamation on, the reserve carries
batch whenever production is not bursting, so the setting that maximises **total useful
work** — production plus batch cpu core-hours over the window — is a joint result.

Here a first-fit-decreasing repack (:func:`~kalena_engine.replay.compaction.ffd_blueprint`)
stands in for Kuberina's solver at every setting, 100 % included (so the settings compare
like with like; none of them is Kuberina's own blueprint). Batch runs on the nodes the repack
used (the replay's default: nodes left empty are capacity the planner freed).
"""

from __future__ import annotations

from dataclasses import replace

from kalena_engine.kuberina import phase0_capacity
from kalena_engine.replay.compaction import ffd_blueprint
from kalena_engine.replay.setup import ReplayInputs

PERCENTS = (70.0, 75.0, 80.0, 85.0, 90.0, 95.0, 100.0)


def pareto_inputs(inputs: ReplayInputs, percent: float) -> ReplayInputs | None:
    """The inputs with production repacked by FFD against ``percent`` % of every node's
    post-Phase-0 capacity (unconstrained dimensions stay unconstrained); ``None`` when some
    production pod fits nowhere.

    Raises:
        ValueError: ``percent`` not in (0, 100].
    """
    if not 0 < percent <= 100:
        raise ValueError(f"a Pareto setting of {percent:g} % is outside (0, 100]")
    blueprint = ffd_blueprint(inputs.infra, inputs.workloads, phase0_capacity(inputs.infra) * (percent / 100.0))
    if len(blueprint.assignment) < len(inputs.workloads.pods):
        return None
    return replace(inputs, blueprint=replace(blueprint, source=f"first-fit decreasing at pareto {percent:g} %",
                                             metadata={"pareto": percent}))


def best_setting(rows: dict[str, dict[str, object]]) -> str | None:
    """The setting with the most ``useful_core_hours`` (ties: the higher percent, i.e. fewer
    reserve); ``None`` when no setting ran."""
    ran = {k: v for k, v in rows.items() if v.get("useful_core_hours") is not None}
    if not ran:
        return None
    return max(ran, key=lambda k: (float(ran[k]["useful_core_hours"]), float(ran[k]["pareto_percent"])))
