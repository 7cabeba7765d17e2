"""Every filter, table-driven: which nodes pass and the typed reason for the ones rejected."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from kalena_engine.kuberina.model import Taint, Toleration
from kalena_engine.ledger import ledgers
from kalena_engine.placement import (
    AntiAffinityTerm, BatchResidents, BatchTemplate, Evictions, LabelSelector, NodeRequirement, NodeSelectorTerm,
    PlacementPolicy, ProductionPods, Requirement, SpreadConstraint, schedule_batch,
)
from kalena_engine.placement import filters as F
from kalena_engine.placement import reasons as R
from kalena_engine.policy import Policy
from kalena_engine.resources import GPU, ir_vector
from tests.engine.placement.builders import Entry, Node, pending, snapshot

T = BatchTemplate


@dataclass
class View:
    """A minimal :class:`kalena_engine.placement.filters.PassView`."""

    snapshot: object
    policy: PlacementPolicy = field(default_factory=PlacementPolicy)
    cooldown_s: float = 600.0
    placed: list = field(default_factory=list)  # (template, node, count)

    @property
    def slack(self):
        return self.snapshot.slack

    def placed_rows(self):
        return ([p[0] for p in self.placed], np.array([p[1] for p in self.placed], dtype=np.int64),
                np.array([p[2] for p in self.placed], dtype=np.int64))

    def namespace_running(self, namespace):
        return self.snapshot.batch.running_in(namespace) + sum(c for t, _, c in self.placed if t.namespace == namespace)


def run_filter(rule, view, template):
    mask = rule.mask(view, template)
    rejected = np.flatnonzero(~mask)
    return np.flatnonzero(mask).tolist(), rule.explain(view, template, rejected)


def prod(*pods):
    """ProductionPods from (id, node row, labels, terms, names) tuples."""
    return ProductionPods(ids=tuple(p[0] for p in pods), node=np.array([p[1] for p in pods], dtype=np.int64),
                          namespaces=tuple(p[0].split("/")[0] for p in pods), labels=tuple(p[2] for p in pods),
                          terms=tuple(p[3] for p in pods), names=tuple(p[4] for p in pods))


NODE_CONDITION = [
    ("all_good", [Node("a")], [0], []),
    ("not_ready", [Node("a", ready=False), Node("b")], [1], [R.NodeNotReady("a")]),
    ("telemetry_stale_takes_no_batch", [Node("a", fresh=False), Node("b")], [1], [R.TelemetryStale("a")]),
    ("slack_ineligible", [Node("a", eligible=False), Node("b")], [1], [R.SlackIneligible("a")]),
    ("not_ready_wins_over_stale", [Node("a", ready=False, fresh=False)], [], [R.NodeNotReady("a")]),
]


@pytest.mark.parametrize(("nodes", "passing", "reasons"), [c[1:] for c in NODE_CONDITION], ids=[c[0] for c in NODE_CONDITION])
def test_node_condition(nodes, passing, reasons) -> None:
    assert run_filter(F.NodeCondition, View(snapshot(nodes)), T("job")) == (passing, reasons)


COOLDOWN = [
    # (name, evicted owner, evicted at (now = 1000), cooldown_s, passing)
    ("evicted_599_s_ago", "job", 401.0, 600.0, [1]),
    ("evicted_600_s_ago_is_open_again", "job", 400.0, 600.0, [0, 1]),
    ("another_owner_evicted", "other", 900.0, 600.0, [0, 1]),
    ("policy_cooldown_1200_s", "job", 100.0, 1200.0, [1]),
]


@pytest.mark.parametrize(("owner", "at", "cooldown", "passing"), [c[1:] for c in COOLDOWN], ids=[c[0] for c in COOLDOWN])
def test_eviction_cooldown_per_owner_and_node(owner, at, cooldown, passing) -> None:
    ev = Evictions(owner=np.array([owner], dtype=object), node=np.array([0]), time_s=np.array([at]))
    view = View(snapshot([Node("a"), Node("b")], now_s=1000.0, evictions=ev), cooldown_s=cooldown)
    got, reasons = run_filter(F.CooldownFilter, view, T("job"))
    assert got == passing
    assert reasons == ([] if 0 in passing else [R.Cooldown("a", "job", at, at + cooldown)])


SELECTOR = [
    ("match", {"disk": "ssd"}, [0], []),
    ("wrong_value", {"disk": "nvme"}, [], [R.SelectorMismatch("a", "disk", "nvme", "ssd")]),
    ("absent_label", {"gpu": "a100"}, [], [R.SelectorMismatch("a", "gpu", "a100", None)]),
    ("empty_selector_matches_all", {}, [0], []),
]


@pytest.mark.parametrize(("selector", "passing", "reasons"), [c[1:] for c in SELECTOR], ids=[c[0] for c in SELECTOR])
def test_node_selector(selector, passing, reasons) -> None:
    view = View(snapshot([Node("a", labels={"disk": "ssd"})]))
    assert run_filter(F.NodeSelectorFilter, view, T("job", node_selector=selector)) == (passing, reasons)


def term(*requirements) -> NodeSelectorTerm:
    return NodeSelectorTerm(tuple(NodeRequirement(*r) for r in requirements))


AFFINITY_NODES = [Node("a", labels={"accelerator": "a100", "gpu-count": "8"}),
                  Node("b", labels={"accelerator": "t4", "gpu-count": "1"}), Node("c", labels={})]
AFFINITY = [
    ("in", (term(("accelerator", "In", ("a100", "h100"))),), [0]),
    ("not_in_matches_an_absent_label", (term(("accelerator", "NotIn", ("t4",))),), [0, 2]),
    ("exists", (term(("gpu-count", "Exists")),), [0, 1]),
    ("does_not_exist", (term(("gpu-count", "DoesNotExist")),), [2]),
    ("gt_reads_the_label_as_an_integer", (term(("gpu-count", "Gt", ("3",))),), [0]),
    ("lt", (term(("gpu-count", "Lt", ("3",))),), [1]),
    ("requirements_are_anded", (term(("accelerator", "In", ("a100", "t4")), ("gpu-count", "Lt", ("4",))),), [1]),
    ("terms_are_ored", (term(("accelerator", "In", ("t4",))), term(("gpu-count", "DoesNotExist"))), [1, 2]),
    ("match_fields_on_the_node_name", (term(("metadata.name", "In", ("c",), True)),), [2]),
    ("an_empty_term_matches_no_node", (NodeSelectorTerm(()),), []),
]


@pytest.mark.parametrize(("terms", "passing"), [c[1:] for c in AFFINITY], ids=[c[0] for c in AFFINITY])
def test_required_node_affinity(terms, passing) -> None:
    view = View(snapshot(AFFINITY_NODES))
    got, reasons = run_filter(F.NodeSelectorFilter, view, T("job", node_affinity=terms))
    assert got == passing
    text = "; ".join(str(t) for t in terms)
    assert reasons == [R.NodeAffinityMismatch(n.name, text) for i, n in enumerate(AFFINITY_NODES) if i not in passing]


@pytest.mark.parametrize("bad", [("k", "Near", ("x",)), ("k", "In", ()), ("k", "Exists", ("x",)), ("k", "Gt", ("x",)),
                                 ("k", "Gt", ("1", "2")), ("spec.unschedulable", "In", ("true",), True)])
def test_a_malformed_node_requirement_is_refused_naming_it(bad) -> None:
    from kalena_engine.errors import InputError

    with pytest.raises(InputError) as err:
        NodeRequirement(*bad)
    assert "nodeAffinity" in err.value.field


def test_spread_domains_are_those_the_node_affinity_allows() -> None:
    """nodeAffinityPolicy Honor (Kubernetes' default): a zone the pod may not use is no domain."""
    nodes = [Node("a", zone="z1", labels={"pool": "batch"}), Node("b", zone="z2", labels={"pool": "batch"}),
             Node("c", zone="z3", labels={"pool": "db"})]
    template = T("batch/w", labels={"app": "w"}, spread=(SpreadConstraint(1, "zone"),),
                 node_affinity=(term(("pool", "In", ("batch",))),))
    result = schedule_batch(snapshot(nodes), pending([Entry("w", 4)], [template]), Policy(), rng=np.random.default_rng(0))
    placed = result.bindings.node.tolist()
    assert result.placed == 4 and sorted(placed) == [0, 0, 1, 1]  # z3 (count 0) would have capped z1, z2 at 1


NO_SCHEDULE = Taint("dedicated", "gpu", "NoSchedule")
TAINTS = [
    ("no_tolerations_tolerate_nothing", NO_SCHEDULE, (), False),
    ("key_exists", NO_SCHEDULE, (Toleration("dedicated"),), True),
    ("equal_value", NO_SCHEDULE, (Toleration("dedicated", "Equal", "gpu"),), True),
    ("equal_other_value", NO_SCHEDULE, (Toleration("dedicated", "Equal", "db"),), False),
    ("empty_key_exists_tolerates_all", NO_SCHEDULE, (Toleration(""),), True),
    ("prefer_no_schedule_never_blocks", Taint("soft", "", "PreferNoSchedule"), (), True),
    ("no_execute_needs_its_effect", Taint("k", "", "NoExecute"), (Toleration("k", effect="NoSchedule"),), False),
]


@pytest.mark.parametrize(("taint", "tolerations", "passes"), [c[1:] for c in TAINTS], ids=[c[0] for c in TAINTS])
def test_taints_follow_the_kubernetes_rule(taint, tolerations, passes) -> None:
    view = View(snapshot([Node("a", taints=(taint,))]))
    got, reasons = run_filter(F.TaintFilter, view, T("job", tolerations=tolerations))
    assert got == ([0] if passes else [])
    assert reasons == ([] if passes else [R.UntoleratedTaint("a", taint.key, taint.value, taint.effect)])


NOISY = AntiAffinityTerm(LabelSelector.of(app="noisy-io"))
PRODUCTION_ANTI = [
    # (name, production pods, template, passing nodes, reason pods)
    ("label_term_on_hostname", [("prod/db-0", 0, {"app": "db"}, (NOISY,), ())], T("j", labels={"app": "noisy-io"}),
     [1, 2], ["prod/db-0"]),
    ("term_does_not_match", [("prod/db-0", 0, {"app": "db"}, (NOISY,), ())], T("j", labels={"app": "quiet"}), [0, 1, 2], []),
    ("zone_topology_excludes_the_zone", [("prod/db-0", 0, {}, (AntiAffinityTerm(LabelSelector.of(app="noisy-io"), "zone"),), ())],
     T("j", labels={"app": "noisy-io"}), [1], ["prod/db-0", "prod/db-0"]),
    ("match_expressions_in", [("prod/db-0", 2, {}, (AntiAffinityTerm(LabelSelector.of(
        expressions=(Requirement("tier", "In", ("batch", "best-effort")),))),), ())],
     T("j", labels={"tier": "batch"}), [0, 1], ["prod/db-0"]),
    ("term_namespaces_restrict", [("prod/db-0", 0, {}, (AntiAffinityTerm(LabelSelector.of(app="noisy-io"), namespaces=("prod",)),), ())],
     T("j", namespace="batch", labels={"app": "noisy-io"}), [0, 1, 2], []),
    ("kuberina_name_list", [("prod/api-0", 1, {}, (), ("batch/etl-0",))], T("batch/etl", member_ids=("batch/etl-0",)),
     [0, 2], ["prod/api-0"]),
]


@pytest.mark.parametrize(("pods", "template", "passing", "blockers"), [c[1:] for c in PRODUCTION_ANTI],
                         ids=[c[0] for c in PRODUCTION_ANTI])
def test_production_anti_affinity_binds_batch(pods, template, passing, blockers) -> None:
    nodes = [Node("a", zone="z1"), Node("b", zone="z2"), Node("c", zone="z1")]
    view = View(snapshot(nodes, production=prod(*pods)))
    got, reasons = run_filter(F.ProductionAntiAffinityFilter, view, template)
    assert got == passing
    assert [r.pod for r in reasons] == blockers
    assert all(isinstance(r, R.AntiAffinity) and r.kind == "production_anti_affinity" for r in reasons)


def test_batch_anti_affinity_own_terms_and_resident_batch_terms() -> None:
    nodes = [Node("a"), Node("b"), Node("c")]
    other = T("batch/spark", labels={"app": "spark"}, anti_affinity=(AntiAffinityTerm(LabelSelector.of(app="etl")),))
    residents = BatchResidents(node=np.array([2]), count=np.array([1]), template=np.array([0]), templates=(other,))
    view = View(snapshot(nodes, production=prod(("prod/db-0", 0, {"app": "db"}, (), ())), batch=residents))
    # own term against a production pod's labels: node a excluded
    mine = T("batch/etl", labels={"app": "etl"}, anti_affinity=(AntiAffinityTerm(LabelSelector.of(app="db")),))
    got, reasons = run_filter(F.BatchAntiAffinityFilter, view, mine)
    # node c hosts a spark pod whose own term rejects app=etl (anti-affinity is symmetric)
    assert got == [1]
    assert [(r.node, r.kind) for r in reasons] == [("a", "batch_anti_affinity"), ("c", "batch_anti_affinity")]
    # placed in this pass: a pod of a template that avoids itself
    lonely = T("batch/lonely", labels={"app": "lonely"}, anti_affinity=(AntiAffinityTerm(LabelSelector.of(app="lonely")),))
    view.placed.append((lonely, 1, 1))
    assert run_filter(F.BatchAntiAffinityFilter, view, lonely)[0] == [0, 2]


def test_self_anti_affinity_places_one_pod_per_node() -> None:
    lonely = T("batch/lonely", labels={"app": "lonely"}, anti_affinity=(AntiAffinityTerm(LabelSelector.of(app="lonely")),))
    result = schedule_batch(snapshot([Node("a"), Node("b")]), pending([Entry("lonely", 3)], [lonely]), Policy(),
                            rng=np.random.default_rng(0))
    assert sorted(result.bindings.node.tolist()) == [0, 1] and result.pending == 1
    assert result.why_pending()[0].binding == "batch_anti_affinity"


def test_spread_counts_batch_pods_only() -> None:
    # Docstring example: maxSkew 1, zone counts a=2, b=1, c=1 → zone a rejected (2 + 1 − 1 = 2 > 1).
    nodes = [Node("n-a", zone="a"), Node("n-b", zone="b"), Node("n-c", zone="c")]
    spread = T("batch/w", labels={"app": "w"}, spread=(SpreadConstraint(1, "zone"),))
    residents = BatchResidents(node=np.array([0, 1, 2]), count=np.array([2, 1, 1]), template=np.array([0, 0, 0]),
                               templates=(spread,))
    many_prod = prod(*[(f"prod/w-{i}", 1, {"app": "w"}, (), ()) for i in range(5)])  # production: never counted
    view = View(snapshot(nodes, batch=residents, production=many_prod))
    got, reasons = run_filter(F.SpreadFilter, view, spread)
    assert got == [1, 2]
    assert reasons == [R.SpreadSkew("n-a", "zone", "a", 2, 1, 1)]


def test_spread_through_a_pass_balances_zones() -> None:
    nodes = [Node(f"n{i}", zone=z) for i, z in enumerate("aabbc")]
    spread = T("batch/w", labels={"app": "w"}, spread=(SpreadConstraint(1, "zone"),))
    result = schedule_batch(snapshot(nodes), pending([Entry("w", 6)], [spread]), Policy(), rng=np.random.default_rng(0))
    zones = [nodes[n].zone for n in result.bindings.node.tolist() for _ in range(1)]
    counts = {z: zones.count(z) for z in "abc"}
    assert result.placed == 6 and counts == {"a": 2, "b": 2, "c": 2}


NAMESPACE_CAP = [
    # (name, cap, running in the namespace, pending, placed)
    ("at_cap_places_nothing", 5, 5, 4, 0),
    ("room_for_two", 5, 3, 4, 2),
    ("other_namespace_cap_does_not_apply", None, 50, 4, 4),
]


@pytest.mark.parametrize(("cap", "running", "want", "placed"), [c[1:] for c in NAMESPACE_CAP], ids=[c[0] for c in NAMESPACE_CAP])
@pytest.mark.parametrize("naive", [False, True], ids=["optimised", "naive"])
def test_namespace_running_batch_cap(cap, running, want, placed, naive) -> None:
    template = T("batch/etl", namespace="team-a")
    residents = BatchResidents(node=np.array([0]), count=np.array([running]), template=np.array([0]), templates=(template,))
    caps = (("team-a", cap),) if cap is not None else (("team-b", 1),)
    policy = Policy().with_placement(namespace_batch_caps=caps)
    result = schedule_batch(snapshot([Node("a", batch=True)], batch=residents), pending([Entry("etl", want)], [template]),
                            policy, rng=np.random.default_rng(0), naive=naive)
    assert result.placed == placed
    if placed < want:
        record = result.why_pending()[0]
        assert record.binding == "namespace_cap"
        assert record.rejections[0] == R.NamespaceCap("a", "team-a", cap, cap)


FIT = [
    # (name, request cores/GiB/gpu, node slack cores/GiB/gpu, short dims)
    ("fits_exactly", (2, 8, 0), (2, 8, 0), []),
    ("cpu_short", (3, 8, 0), (2, 8, 0), ["cpu"]),
    ("cpu_and_ram_short", (3, 9, 0), (2, 8, 0), ["cpu", "ram"]),
    ("gpu_short", (1, 1, 1), (8, 8, 0), ["gpu"]),
]


@pytest.mark.parametrize(("req", "free", "short"), [c[1:] for c in FIT], ids=[c[0] for c in FIT])
def test_reservation_fit_every_dimension(req, free, short) -> None:
    view = View(snapshot([Node("a", gpu=1, slack_cpu=free[0], slack_ram=free[1], slack_gpu=free[2])]))
    request = ir_vector(cpu=req[0], ram=req[1], gpu=req[2])
    assert F.ReservationFit.mask_for(view, request).tolist() == [not short]
    reasons = F.ReservationFit.explain_for(view, request, np.array([0])) if short else []
    assert [r.dim for r in reasons] == short


def test_gpu_never_comes_from_slack() -> None:
    # A GPU node whose production pod requests its only GPU but uses none of it: the estimator
    # would put r_gpu at q anyway (pinned), and the ledger's GPU slack is C − Σ q = 0.
    capacity = np.array([ir_vector(cpu=16, ram=64, gpu=1)])
    q = np.array([ir_vector(cpu=4, ram=8, gpu=1)])
    r = np.array([ir_vector(cpu=1, ram=2, gpu=0)])  # even a reservation below the request
    led = ledgers(capacity, prod_node=np.array([0]), prod_request=q, prod_reservation=r,
                  batch_node=np.zeros(0, dtype=np.int64), batch_request=np.zeros((0, 8)), batch_reservation=np.zeros((0, 8)))
    assert led.slack[0, GPU] == 0.0
    snap = snapshot([Node("g", gpu=1, slack_gpu=float(led.slack[0, GPU]))])
    result = schedule_batch(snap, pending([Entry("train", 1, gpu=1)]), Policy(), rng=np.random.default_rng(0))
    assert result.placed == 0 and result.why_pending()[0].binding == "gpu"
