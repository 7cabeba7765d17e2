"""Required anti-affinity terms in the constraint shape → engine terms
(``kalena_engine.placement.selectors.anti_affinity_terms_of``): the one reader of a batch pod's
own terms and of a resident production pod's (docs/design.md §9), table-driven."""

from __future__ import annotations

import pytest

from kalena_engine.errors import InputError
from kalena_engine.placement import HOSTNAME, AntiAffinityTerm, LabelSelector, Requirement
from kalena_engine.placement.selectors import anti_affinity_terms_of

NOISY = LabelSelector.of(app="noisy")

READ = [
    ("docstring_example", [{"labelSelector": {"matchLabels": {"app": "noisy"}}, "namespaces": ["web"]}],
     (AntiAffinityTerm(NOISY, HOSTNAME, ("web",)),)),
    ("zone_and_expressions",
     [{"labelSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["etl"]}]},
       "topologyKey": "topology.kubernetes.io/zone"}],
     (AntiAffinityTerm(LabelSelector.of(expressions=(Requirement("team", "In", ("etl",)),)),
                       "topology.kubernetes.io/zone"),)),
    ("empty_namespaces_is_every_namespace", [{"labelSelector": {"matchLabels": {"app": "noisy"}}, "namespaces": []}],
     (AntiAffinityTerm(NOISY, HOSTNAME, ()),)),
    ("the_rest_api_s_short_form", [{"matchLabels": {"app": "noisy"}}], (AntiAffinityTerm(NOISY, HOSTNAME),)),
    ("none", None, ()),
]


@pytest.mark.parametrize(("raw", "terms"), [c[1:] for c in READ], ids=[c[0] for c in READ])
def test_terms_are_read(raw, terms) -> None:
    assert anti_affinity_terms_of(raw, "t") == terms


def test_a_read_term_matches_as_kubernetes_does() -> None:
    (term,) = anti_affinity_terms_of([{"labelSelector": {"matchLabels": {"app": "noisy"}}, "namespaces": ["web"]}], "t")
    assert term.matches({"app": "noisy", "team": "x"}, "web")
    assert not term.matches({"app": "noisy"}, "batch")  # another namespace
    assert not term.matches({"app": "quiet"}, "web")


BAD = [
    ("not_a_list", {"labelSelector": {}}, "t", "expected a list"),
    ("a_term_not_a_mapping", ["app=noisy"], "t[0]", "expected a mapping"),
    ("topology_key_not_a_string", [{"labelSelector": {}, "topologyKey": 3}], "t[0].topologyKey", "expected a string"),
    ("namespaces_a_string", [{"labelSelector": {}, "namespaces": "web"}], "t[0].namespaces", "list of strings"),
    ("match_labels_a_string", [{"labelSelector": {"matchLabels": "app=noisy"}}], "t[0].labelSelector.matchLabels",
     "matchLabels must map"),
    ("unknown_operator", [{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}}],
     "t[0].labelSelector.matchExpressions[0]", "not supported"),
    ("values_not_strings", [{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": [5]}]}}],
     "t[0].labelSelector.matchExpressions[0]", "list of string values"),
]


@pytest.mark.parametrize(("raw", "field", "problem"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_malformed_term_names_the_field(raw, field, problem) -> None:
    with pytest.raises(InputError) as info:
        anti_affinity_terms_of(raw, "t")
    assert info.value.field == field and problem in info.value.problem
