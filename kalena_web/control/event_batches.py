"""How :mod:`kalena_web.control.reconciler` batches and compares the watch's events
(:mod:`agents.orchestrators.events`): the object an event names, whether a sharded reconciler
owns it, what makes an event the same as the last one applied for its object, a ``NodeSeen``'s
images, and the order a batch is applied in (grouped in waves, so each kind goes in bulk).
Pure: no database."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

from agents.orchestrators.events import NodeGone, NodeSeen, PodPending, PodRunning, ProductionSeen, Resynced, WatchEvent


def grouped(events: list[WatchEvent]) -> tuple[list[WatchEvent], list[int] | None]:
    """``events`` with the ``PodPending`` and ``PodRunning`` events between two events of
    other kinds grouped by kind (pending first), and the original index of each (None: the
    order is unchanged). Events of distinct pods are independent, so their order does not
    matter; a pod's own events keep theirs: the events are taken in *waves* — every pod's first
    event, then every pod's second, … — each wave grouped by kind. A re-list or a stream of
    arrivals interleaves the two kinds, and a pod's pending and bound reports often share a
    batch: grouped, each kind is applied in bulk rather than one event at a time.

    Example: pending a, pending b, running a, pending c, running b → pending a, b, c, then
    running a, b (wave 0: pending a, b, c; wave 1: running a, b)."""
    order: list[int] = []
    segment: list[int] = []

    def close() -> None:
        count: Counter = Counter()
        waves = []
        for k in segment:
            ref = ref_of(events[k])
            waves.append(count[ref])
            count[ref] += 1
        order.extend(k for _, _, k in sorted((wave, type(events[k]) is not PodPending, k)
                                              for wave, k in zip(waves, segment, strict=True)))
        segment.clear()

    for k, e in enumerate(events):
        if type(e) in (PodPending, PodRunning):
            segment.append(k)
        else:
            close()
            order.append(k)
    close()
    if order == list(range(len(events))):
        return events, None
    return [events[k] for k in order], order


CACHED = (NodeSeen, PodPending, PodRunning, ProductionSeen)
EXCLUSIVE = {PodPending: PodRunning, PodRunning: PodPending}


def cache_form(event: WatchEvent) -> object:
    """What makes a cached event the same as the last one applied: the whole event, except
    that a ``PodRunning`` is its pod, node and admission (its running time is noted once, from
    the first report, and its admission once: the pod's bound-but-Pending update and its
    Running one change nothing twice)."""
    if isinstance(event, PodRunning):
        return (event.ref, event.node, event.admitted)
    if isinstance(event, NodeSeen):  # when it was seen changes nothing for an unchanged node
        return dataclasses.replace(event, at_s=0.0)
    return event


def images_of(e: NodeSeen) -> dict[str, float]:
    images = dict(e.image_bytes)
    for name in e.images:
        images.setdefault(name, 0.0)
    return images


def owned(owns: Callable[[str, str], bool], event: object) -> bool:
    """Whether a sharded reconciler applies ``event``: a node's by its name, a pod's by its ref;
    ``Resynced`` always (it marks gone only what is owned)."""
    if isinstance(event, Resynced):
        return True
    if isinstance(event, NodeSeen | NodeGone):
        return owns("node", event.name)
    return owns("pod", ref_of(event))


def ref_of(event: object) -> str:
    return str(getattr(event, "ref", None) or getattr(event, "name", None) or "")
