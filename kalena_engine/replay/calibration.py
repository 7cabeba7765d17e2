"""Calibration (Borg §5.5 / Fig. 12; docs/design.md §10; proposal §6.4): the estimator's margin ``μ``
and half-life ``h`` swept on the same replay — same inputs, seed and full diurnal cycle for
every setting, a paired comparison (what Borg's A/B/A/B weeks approximate on a live cell) —
giving the *safety curve*: reclaimed cpu against batch evictions per 100 batch pod-hours,
production contention beside it.

**The knee.** Keep the settings no other setting beats on both axes (the Pareto frontier:
more reclaimed cpu, fewer evictions); walk it from the fewest evictions towards more harvest.
The step from frontier point ``a`` to the next ``b`` costs::

    slope = (e_b − e_a) / (100 · (x_b − x_a))     evictions per 100 pod-h per percentage point

with ``e`` = ``batch_evictions_per_100_pod_hours`` and ``x`` = ``reclaimed_fraction_cpu``. The
knee is the last point reached while every step costs at most ``rate`` (default
:data:`KNEE_RATE`): past it, one more % of reclaimed cpu costs more than ``rate`` evictions per
100 batch pod-hours. Example: frontier (x 10 %, e 0.2), (12 %, 0.6), (13 %, 1.9), rate 0.5 →
steps cost 0.2 then 1.3 → knee (12 %, 0.6).
"""

from __future__ import annotations

from dataclasses import fields, replace

from kalena_engine.policy import EstimatorPolicy, Policy
from kalena_engine.predictors import MEMBERS, PREDICTORS
from kalena_engine.policy_file import Calibration, CalibrationPoint, PolicyDocument, PolicyMetadata
from kalena_engine.replay.setup import ReplayConfig

#: Default knee rate: evictions per 100 batch pod-hours one more percentage point of reclaimed
#: cpu may cost (a stated operator tolerance, docs/evaluation.md).
KNEE_RATE = 0.5
#: The default grid (``evaluate calibrate``): swept as a cross (:data:`GRIDS`) centred on μ 1.45,
#: h 1200 s — the knee of the 24-h default window's sweep measured in docs/evaluation.md — and
#: grown towards the knee by :func:`widen_grid` while it lies on an edge (the centre only sets
#: how many rounds that takes).
MARGINS = (1.3, 1.45, 1.6)
HALF_LIVES = (600.0, 1200.0, 2400.0)
#: Summary fields a point carries (docs/design.md §10's point keys, plus OOM kills).
POINT_FIELDS = ("reclaimed_fraction_cpu", "reclaimed_fraction_ram", "batch_evictions_per_100_pod_hours",
                "production_contention_core_hours")


#: The estimator's predictor the sweep runs when none is named: Kalena's asymmetric rule.
ASYMMETRIC = "asymmetric"
#: Estimator fields a predictor variant may set (``--predictors nsigma:n_sigma=2:window_s=3600``);
#: μ and h are swept on their own axes.
VARIANT_KEYS = tuple(f.name for f in fields(EstimatorPolicy)
                     if f.name not in ("grace_s", "stale_min_s", "limit_ratio", "predictor"))
#: Keys a variant may *pin*: that variant is run at this μ or h only, not across the axis.
PINS = ("margin_ratio", "half_life_s")
#: The predictor variants ``kalena evaluate calibrate --predictors all`` sweeps beside μ × h:
#: Kalena's asymmetric rule, Borg's RC-like percentile at p99 and p95, N-sigma at N 3 and 5, the
#: max of those two members, and the per-workload choice (Autopilot). The periodic member needs
#: whole earlier days of history (``periodic_days``), which a 24-h replay starting from nothing
#: does not have (it would serve the asymmetric rule all day), so it is swept only when named.
PREDICTOR_VARIANTS = ("asymmetric", "percentile", "percentile:percentile=95", "nsigma", "nsigma:n_sigma=5",
                      "max:members=percentile+nsigma", "auto")


def shipped_variant() -> str:
    """The shipped estimator (``Policy()``) as a variant pinned at its μ and h, every other key
    its own: ``auto:margin_ratio=1.15:half_life_s=1200``."""
    shipped = Policy().estimator
    return f"{shipped.predictor}:margin_ratio={shipped.margin_ratio:g}:half_life_s={shipped.half_life_s:g}"


#: What ``evaluate calibrate`` sweeps when ``--predictors`` is not given: the asymmetric rule across
#: μ × h, and the shipped estimator at its own setting, so a plain sweep weighs the default it
#: would replace (every other variant multiplies the replays; ``--predictors all`` names them).
DEFAULT_PREDICTORS = (ASYMMETRIC, shipped_variant())


def parse_variant(text: str) -> tuple[str, tuple[tuple[str, object], ...]]:
    """A predictor variant ``name[:key=value…]`` as ``(label, ((key, value), …))``, ``members``
    values joined by ``+``; the label is the canonical text (keys in the order given). A
    ``margin_ratio`` or ``half_life_s`` key *pins* that axis for the variant (:data:`PINS`).

    Raises:
        ValueError: an unknown predictor or key, or a value the estimator refuses — naming it.

    Example: ``"nsigma:n_sigma=5"`` → ``("nsigma:n_sigma=5", (("predictor", "nsigma"), ("n_sigma", 5.0)))``.
    """
    name, *pairs = [part.strip() for part in text.strip().split(":")]
    if name not in PREDICTORS:
        raise ValueError(f"predictor {name!r} is unknown (accepted: {', '.join(PREDICTORS)})")
    params: list[tuple[str, object]] = [("predictor", name)]
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in VARIANT_KEYS:
            raise ValueError(f"{text!r}: {key or pair!r} is not a predictor key (accepted: key=value with key one of "
                             f"{', '.join(VARIANT_KEYS)})")
        if key == "members":
            members = tuple(m.strip() for m in value.split("+") if m.strip())
            unknown = [m for m in members if m not in MEMBERS]
            if unknown or not members:
                raise ValueError(f"{text!r}: members {value!r}: each must be one of {', '.join(MEMBERS)} (joined by +)")
            params.append((key, members))
            continue
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{text!r}: {key} {value!r} is not a number") from None
        kind = type(getattr(EstimatorPolicy(), key))
        if key in PINS and not number > 0:
            raise ValueError(f"{text!r}: {key} {value!r} must be positive")
        params.append((key, int(number) if kind is int else number))
    try:
        estimator = replace(EstimatorPolicy(), **dict(params))
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    _check_ranges(estimator, text)
    label = ":".join([name] + [f"{k}={'+'.join(v) if isinstance(v, tuple) else f'{v:g}'}" for k, v in params[1:]])
    return label, tuple(params)


def _check_ranges(estimator: EstimatorPolicy, text: str) -> None:
    """The policy file's ranges for the predictor keys (the one parser's, docs/design.md §10)."""
    from kalena_engine.errors import PolicyError
    from kalena_engine.policy_file import PolicyDocument, dump_policy_text, parse_policy_text

    try:
        parse_policy_text(dump_policy_text(PolicyDocument(policy=Policy(estimator=estimator))), source="--predictors")
    except (PolicyError, ValueError) as exc:
        problem = str(exc).split(": ", 1)[-1] if str(exc).startswith("--predictors:") else str(exc)
        raise ValueError(f"{text!r}: {problem}") from None


def setting_name(margin: float, half_life_s: float, load_factor: float, predictor: str = ASYMMETRIC) -> str:
    """A sweep setting's display name, e.g. ``μ1.15 h600 ×1`` (the asymmetric rule) or
    ``nsigma μ1.15 h600 ×4``."""
    head = "" if predictor == ASYMMETRIC else f"{predictor} "
    return f"{head}μ{margin:g} h{half_life_s:g} ×{load_factor:g}"


def sweep_settings(margins: tuple[float, ...], half_lives: tuple[float, ...], predictors: tuple[str, ...] = (ASYMMETRIC,),
                   grid: str = "full") -> dict[str, list[tuple[float, float]]]:
    """The settings a sweep starts from: ``{variant label: [(μ, h), …]}`` — every variant
    (:func:`parse_variant`) at :func:`grid_settings` of the grid, a pinned axis at its value.

    Raises:
        ValueError: an empty or repeated list, an unknown grid, predictor or key, or a value the
            estimator refuses.
    """
    parsed = [parse_variant(p) for p in predictors]
    labels = [label for label, _ in parsed]
    for label, values in (("margins", margins), ("half-lives", half_lives)):
        if not values:
            raise ValueError(f"no {label} to sweep")
        if len(set(values)) != len(values):
            raise ValueError(f"a value is named twice in the {label} {', '.join(f'{v:g}' for v in values)}")
    if not labels:
        raise ValueError("no predictors to sweep")
    if len(set(labels)) != len(labels):
        raise ValueError(f"a predictor is named twice in {', '.join(labels)}")
    start = grid_settings(margins, half_lives, grid)
    return {label: variant_settings(params, start) for label, params in parsed}


def settings_configs(base: ReplayConfig, settings: dict[str, list[tuple[float, float]]],
                     load_factors: tuple[float, ...]) -> dict[str, ReplayConfig]:
    """One Kalena-rule replay per (load factor, variant, (μ, h) of ``settings``), identical but
    for those; every other estimator field is the base policy's. Named by :func:`setting_name`.

    Raises:
        ValueError: no load factor, or one named twice.
    """
    if not load_factors:
        raise ValueError("no load factors to sweep")
    if len(set(load_factors)) != len(load_factors):
        raise ValueError(f"a value is named twice in the load factors {', '.join(f'{v:g}' for v in load_factors)}")
    out = {}
    for load in load_factors:
        for label, pairs in settings.items():
            params = parse_variant(label)[1]
            for mu, h in pairs:
                values = {**dict(params), "margin_ratio": float(mu), "half_life_s": float(h)}
                policy = replace(base.policy, estimator=replace(base.policy.estimator, **values))
                out[setting_name(mu, h, load, label)] = replace(base, policy=policy, load_factor=float(load),
                                                                reservation_rule="kalena")
    return out


def sweep_configs(base: ReplayConfig, margins: tuple[float, ...], half_lives: tuple[float, ...],
                  load_factors: tuple[float, ...], predictors: tuple[str, ...] = (ASYMMETRIC,),
                  grid: str = "full") -> dict[str, ReplayConfig]:
    """One Kalena-rule replay per (load factor, predictor variant, (μ, h) of the ``grid``),
    identical but for those (:func:`sweep_settings`, :func:`settings_configs`).

    Raises:
        ValueError: an empty or repeated list, an unknown grid, predictor or key, or a value the
            estimator refuses.
    """
    return settings_configs(base, sweep_settings(margins, half_lives, predictors, grid), load_factors)


def variant_grid(params: tuple[tuple[str, object], ...] | str, margins: tuple[float, ...],
                 half_lives: tuple[float, ...], grid: str = "full") -> list[tuple[float, float]]:
    """The (μ, h) settings a variant runs at: the grid's (:func:`grid_settings`), but a pinned
    axis (:data:`PINS`) at its one value. ``params`` may be the variant's text."""
    return variant_settings(params, grid_settings(margins, half_lives, grid))


def variant_estimator(estimator: EstimatorPolicy, setting: dict[str, object]) -> EstimatorPolicy:
    """``estimator`` with a point's predictor variant, μ and h."""
    _, params = parse_variant(str(setting.get("predictor", ASYMMETRIC)))
    return replace(estimator, **{**dict(params), "margin_ratio": float(setting["margin_ratio"]),
                                 "half_life_s": float(setting["half_life_s"])})


def point(margin: float, half_life_s: float, summary: dict[str, object],
          predictor: str = ASYMMETRIC) -> dict[str, float]:
    """A calibration point: the setting (``predictor`` label, μ, h) and :data:`POINT_FIELDS`
    (plus ``oom_kills`` and ``production_cpu_core_hours``)."""
    row = {"predictor": predictor, "margin_ratio": float(margin), "half_life_s": float(half_life_s)}
    row.update({k: float(summary[k]) for k in POINT_FIELDS})
    row["oom_kills"] = float(summary.get("oom_kills", 0))
    row["production_cpu_core_hours"] = float(summary.get("production_cpu_core_hours", 0.0))
    return row


def _dominated(p: dict[str, float], q: dict[str, float]) -> bool:
    """True when ``q`` beats ``p``: at least as much harvest, at most as many evictions, one strictly."""
    x, e = "reclaimed_fraction_cpu", "batch_evictions_per_100_pod_hours"
    return q[x] >= p[x] and q[e] <= p[e] and (q[x] > p[x] or q[e] < p[e])


def frontier(points: list[dict[str, float]]) -> list[dict[str, float]]:
    """The points no other point beats (module doc), by increasing reclaimed cpu."""
    front = [p for p in points if not any(_dominated(p, q) for q in points)]
    return sorted(front, key=lambda p: (p["reclaimed_fraction_cpu"], -p["batch_evictions_per_100_pod_hours"],
                                        _key(p)))


def knee(points: list[dict[str, float]], rate: float = KNEE_RATE) -> dict[str, float]:
    """The knee of the safety curve (module doc).

    Raises:
        ValueError: no point, or ``rate`` < 0.
    """
    if not points:
        raise ValueError("no calibration point")
    if rate < 0:
        raise ValueError(f"knee rate {rate} must be ≥ 0")
    front = frontier(points)
    chosen = front[0]
    for nxt in front[1:]:
        gain = 100.0 * (nxt["reclaimed_fraction_cpu"] - chosen["reclaimed_fraction_cpu"])
        cost = nxt["batch_evictions_per_100_pod_hours"] - chosen["batch_evictions_per_100_pod_hours"]
        if gain <= 0 or cost / gain > rate:
            break
        chosen = nxt
    return chosen


#: Sweep shapes (``evaluate calibrate --grid``): ``cross`` — every margin at the middle half-life
#: and every half-life at the middle margin, the fewest settings around which a knee can be seen
#: interior (the default) — or ``full``, every margin × half-life.
GRIDS = ("cross", "full")


def grid_settings(margins: tuple[float, ...], half_lives: tuple[float, ...], grid: str = "full",
                  ) -> list[tuple[float, float]]:
    """The (μ, h) settings a sweep starts from: ``full`` — the product (half-life after
    half-life, margins in the order given) — or ``cross`` — every margin at the middle half-life
    and every half-life at the middle margin (the middle: the median of the sorted values, the
    lower one of an even count).

    Raises:
        ValueError: an unknown ``grid`` or an empty axis.

    Example: margins (1.15, 1.3, 1.45), half-lives (600, 1200, 2400), ``cross`` → (1.15, 1200),
    (1.3, 1200), (1.45, 1200), (1.3, 600), (1.3, 2400): 5 settings where ``full`` has 9.
    """
    if grid not in GRIDS:
        raise ValueError(f"grid {grid!r} is not one of {', '.join(GRIDS)}")
    if not margins or not half_lives:
        raise ValueError("no margins or half-lives to sweep")
    if grid == "full":
        return [(float(mu), float(h)) for h in half_lives for mu in margins]
    ms, hs = sorted(set(margins)), sorted(set(half_lives))
    mc, hc = float(ms[(len(ms) - 1) // 2]), float(hs[(len(hs) - 1) // 2])
    return [(float(mu), hc) for mu in margins] + [(mc, float(h)) for h in half_lives if h != hc]


def variant_settings(params: tuple[tuple[str, object], ...] | str,
                     settings: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (μ, h) settings a variant runs at out of the sweep's ``settings``: a pinned axis
    (:data:`PINS`) at its one value, repeats dropped (first kept). ``params`` may be the
    variant's text."""
    if isinstance(params, str):
        params = parse_variant(params)[1]
    given = dict(params)
    out: list[tuple[float, float]] = []
    for mu, h in settings:
        s = (float(given.get("margin_ratio", mu)), float(given.get("half_life_s", h)))
        if s not in out:
            out.append(s)
    return out


_AXES = (("margin_ratio", "--margins", "μ"), ("half_life_s", "--half-lives", "h"))


def _line(chosen: dict[str, object], settings: list[tuple[float, float]], axis: int) -> list[float]:
    """The values along ``axis`` (0: μ, 1: h) swept at the knee's value of the other axis."""
    other = float(chosen[_AXES[1 - axis][0]])
    return [s[axis] for s in settings if s[1 - axis] == other]


def _at(axis: int, chosen: dict[str, object]) -> str:
    key, _, sym = _AXES[1 - axis]
    return f"{sym} {float(chosen[key]):g}{' s' if axis == 0 else ''}"


def _swept_axes(chosen: dict[str, float], settings: list[tuple[float, float]]):
    """Per axis swept at two or more values: ``(axis, flag, sym, values, v, line)`` — the axis's
    sorted values, the knee's value on it and the values swept along the knee's row or column
    (:func:`_line`)."""
    for axis, (key, flag, sym) in enumerate(_AXES):
        values = sorted({s[axis] for s in settings})
        if len(values) >= 2:
            yield axis, flag, sym, values, float(chosen[key]), _line(chosen, settings, axis)


def grid_edges(chosen: dict[str, float], settings: list[tuple[float, float]]) -> list[str]:
    """The edges of the swept ``settings`` (the knee's variant's (μ, h) pairs) the knee
    ``chosen`` lies on, as flag-named phrases: along each axis, the settings swept at the knee's
    value of the other axis (its row or column) — a knee with none of them on one side (a
    larger or a smaller value) lies on that edge, and the true knee may lie that way. An axis
    swept at one value has no edge. Empty when the knee is interior on both axes. On a full
    grid these are the grid's own edges.

    Example: settings (1.0, 600), (1.15, 600), (1.3, 600), (1.15, 300), (1.15, 1200) (a cross):
    a knee (1.15, 600) is interior; (1.3, 600) lies on ``the largest --margins value (1.3)`` and,
    with no other half-life swept at μ 1.3, on both half-life edges.
    """
    edges = []
    for axis, flag, _, values, v, line in _swept_axes(chosen, settings):
        low, high = not any(x < v for x in line), not any(x > v for x in line)
        if low and high:
            edges.append(f"the only {flag} value swept at {_at(axis, chosen)} ({v:g})")
        elif high:
            edges.append(f"the largest {flag} value ({v:g})" if v == values[-1]
                         else f"the largest {flag} value swept at {_at(axis, chosen)} ({v:g})")
        elif low:
            edges.append(f"the smallest {flag} value ({v:g})" if v == values[0]
                         else f"the smallest {flag} value swept at {_at(axis, chosen)} ({v:g})")
    return edges


#: The estimator's smallest margin ratio (docs/design.md §5: μ ≥ 1): a sweep cannot widen below it.
MARGIN_FLOOR = 1.0
#: Widening rounds ``evaluate calibrate`` runs by default before it reports a knee still on an edge.
WIDEN_ROUNDS = 3


def _beyond(values: list[float], axis: int, high: bool) -> float | None:
    """A new value past the outermost of ``values`` (sorted, ≥ 2): margins (axis 0) by the
    outermost gap on that side, never below :data:`MARGIN_FLOOR` (None when already there);
    half-lives (axis 1) by the outermost ratio."""
    if axis == 0:
        if high:
            return round(values[-1] + (values[-1] - values[-2]), 6)
        new = round(values[0] - (values[1] - values[0]), 6)
        if new >= MARGIN_FLOOR:
            return new
        return MARGIN_FLOOR if values[0] > MARGIN_FLOOR else None
    return round(values[-1] * values[-1] / values[-2], 3) if high else round(values[0] * values[0] / values[1], 3)


def widen_grid(chosen: dict[str, float], settings: list[tuple[float, float]],
               ) -> tuple[list[tuple[float, float]], list[str]]:
    """The settings to add beside the knee ``chosen`` on every edge it lies on
    (:func:`grid_edges`), and why (one phrase per edge): on each axis and side with no setting
    swept along the knee's row or column, the nearest value of that axis swept elsewhere on that
    side — or, past the outermost value (the knee is on the sweep's own edge), a new one:
    margins by the outermost gap on that side (…, 1.3, 1.45 → 1.6; never below
    :data:`MARGIN_FLOOR`, said so), half-lives by the outermost ratio (…, 1200, 2400 → 4800 s;
    600 → 300 s) — each paired with the knee's value of the other axis. Only the knee's
    neighbourhood is added, not a whole row or column: a coarse sweep grows towards the knee.
    Empty when the knee is interior or every edge it lies on is a bound.

    Example: the cross of margins (1.15, 1.3, 1.45) and half-lives (600, 1200, 2400) with the
    knee on (1.45, 1200) → (1.6, 1200) (the margins widened), (1.45, 600) and (1.45, 2400) (its
    column filled).
    """
    added: list[tuple[float, float]] = []
    said: list[str] = []
    for axis, flag, sym, values, v, line in _swept_axes(chosen, settings):
        for high in (False, True):
            if any((x > v) if high else (x < v) for x in line):
                continue
            side = "largest" if high else "smallest"
            elsewhere = [x for x in values if (x > v if high else x < v)]
            if elsewhere:
                new = min(elsewhere) if high else max(elsewhere)
                what = f"{sym} {new:g}{' s' if axis else ''} added at {_at(axis, chosen)} (the knee was the {side} swept there)"
            else:
                new = _beyond(values, axis, high)
                if new is None:
                    said.append(f"the knee is on μ = {MARGIN_FLOOR:g}, the estimator's smallest margin: not widened")
                    continue
                what = f"{flag} widened to {new:g}{' s' if axis else ''} (the knee was on the {side}, {v:g}{' s' if axis else ''})"
            s = (new, float(chosen["half_life_s"])) if axis == 0 else (float(chosen["margin_ratio"]), new)
            if s not in settings and s not in added:
                added.append(s)
                said.append(what)
    return added, said


def frontier_across_loads(per_load: dict[str, list[dict[str, float]]]) -> list[dict[str, object]]:
    """The frontier of the first load factor (module doc), each point with its figures at every
    load factor swept: ``{"margin_ratio", "half_life_s", "loads": {load: point}}``, by increasing
    reclaimed cpu at the first load."""
    loads = list(per_load)
    if not loads:
        return []
    by_load = {load: {_key(p): p for p in points} for load, points in per_load.items()}
    out = []
    for p in frontier(per_load[loads[0]]):
        key = _key(p)
        out.append({"predictor": key[0], "margin_ratio": key[1], "half_life_s": key[2],
                    "loads": {load: by_load[load][key] for load in loads if key in by_load[load]}})
    return out


#: The operator's declared tolerance (docs/design.md §10): batch evictions per 100 batch pod-hours, and
#: production contention as a share of production cpu core-hours, at every load factor swept.
MAX_EVICTIONS_PER_100 = 0.1
MAX_CONTENTION_SHARE = 0.0001
#: When no setting is inside the tolerance: the fewest evictions among those within this share of
#: the best harvest.
NEAR_BEST_SHARE = 0.02


def _key(p: dict[str, object]) -> tuple[str, float, float]:
    """A setting's identity: (predictor variant, μ, h)."""
    return (str(p.get("predictor", ASYMMETRIC)), float(p["margin_ratio"]), float(p["half_life_s"]))


def describe(p: dict[str, object]) -> str:
    """A setting as text: ``μ 1.3, h 1200 s`` (the asymmetric rule) or ``nsigma, μ 1.15, h 600 s``."""
    predictor, mu, h = _key(p)
    return f"{'' if predictor == ASYMMETRIC else predictor + ', '}μ {mu:g}, h {h:g} s"


def contention_share(p: dict[str, float]) -> float:
    """Production contention core-hours ÷ production cpu core-hours (0 when there was none)."""
    used = float(p.get("production_cpu_core_hours", 0.0))
    contention = float(p["production_contention_core_hours"])
    return contention / used if used > 0 else (0.0 if contention == 0 else float("inf"))


def shipped(per_load: dict[str, list[dict[str, float]]], *, max_evictions: float = MAX_EVICTIONS_PER_100,
            max_contention_share: float = MAX_CONTENTION_SHARE,
            near_best_share: float = NEAR_BEST_SHARE) -> tuple[dict[str, float], bool, str]:
    """The setting to ship as the default: the operator's tolerance, not a tie-break (docs/design.md §10).

    A setting *qualifies* when at every load factor its batch evictions per 100 batch pod-hours
    are ≤ ``max_evictions`` and its production contention is ≤ ``max_contention_share`` of
    production cpu core-hours. Harvest = its reclaimed cpu fraction averaged over the load
    factors. Ship the qualifying setting with the most harvest; when none qualifies, ship the one
    with the fewest evictions (averaged over the load factors) among those whose harvest is within
    ``near_best_share`` (relative) of the best, and say so.

    Args:
        per_load: ``{load factor: [point, …]}`` (:func:`point`), the same settings at each load.

    Returns:
        ``(the setting's point at the first load factor, qualified, why)``.

    Raises:
        ValueError: no setting swept at every load factor.

    Example: ×1 and ×4 points for A (12 %, 0.05 ev) / (30 %, 0.09), B (13 %, 0.3) / (31 %, 0.5),
    contention 0 → A ships (B is above 0.1 evictions). With A at 0.2 evictions at ×4 instead,
    nothing qualifies; the best mean harvest is B's 22 %, A's 21 % is below 0.98 × 22 % = 21.56 %,
    so B ships (the only one near the best) and the reason says no setting qualified.
    """
    loads = list(per_load)
    if not loads:
        raise ValueError("no calibration point")
    keyed = [{_key(p): p for p in per_load[load]} for load in loads]
    common = [k for k in keyed[0] if all(k in other for other in keyed[1:])]
    if not common:
        raise ValueError("no setting was swept at every load factor")
    harvest = {k: sum(m[k]["reclaimed_fraction_cpu"] for m in keyed) / len(keyed) for k in common}
    evictions = {k: sum(m[k]["batch_evictions_per_100_pod_hours"] for m in keyed) / len(keyed) for k in common}
    ok = [k for k in common if all(m[k]["batch_evictions_per_100_pod_hours"] <= max_evictions
                                   and contention_share(m[k]) <= max_contention_share for m in keyed)]
    tolerance = (f"≤ {max_evictions:g} evictions/100 batch pod-h and contention ≤ {max_contention_share:.4%} of "
                 f"production cpu at ×{', ×'.join(loads)}")
    if ok:
        best = max(ok, key=lambda k: (harvest[k], -evictions[k], k[1], k[2]))
        return keyed[0][best], True, (f"{describe(keyed[0][best])}: the most reclaimed cpu ({harvest[best]:.2%} "
                                      f"mean over the load factors) of the {len(ok)} setting(s) within the tolerance "
                                      f"({tolerance})")
    top = max(harvest.values())
    near = [k for k in common if harvest[k] >= (1.0 - near_best_share) * top]
    best = min(near, key=lambda k: (evictions[k], -harvest[k], k[1], k[2]))
    return keyed[0][best], False, (f"no setting is within the tolerance ({tolerance}); shipping "
                                   f"{describe(keyed[0][best])}, the fewest evictions ({evictions[best]:.3f}/100 pod-h mean) "
                                   f"among the {len(near)} within {near_best_share:.0%} of the best harvest "
                                   f"({top:.2%})")


def better_on_both_axes(candidate: dict[str, float], reference: dict[str, float]) -> bool:
    """At least the reference's reclaimed cpu and at most its evictions, one strictly."""
    return _dominated(reference, candidate)


def calibration_document(document: PolicyDocument, per_load: dict[str, dict[str, object]] | list[dict[str, float]],
                         chosen: dict[str, float], to_ship: dict[str, object] | None = None, within: bool = True, *,
                         margins: tuple[float, ...], half_lives: tuple[float, ...], created: str,
                         predictors: tuple[str, ...] = (), max_evictions: float = MAX_EVICTIONS_PER_100,
                         max_contention_share: float = MAX_CONTENTION_SHARE) -> PolicyDocument:
    """The policy file of a calibration: ``document``'s policy with the shipped setting's
    predictor variant, ``μ`` and ``h`` (the knee's when ``to_ship`` is None), ``metadata.source``
    ``calibration`` and ``metadata.calibration`` (sweep, every load factor's points with their
    ``load_factor`` and ``predictor``, the knee, the shipped setting and the tolerance).

    ``per_load``: ``{load: {"points": [...]}}`` (the sweep's summary) or one load's point list.
    """
    if isinstance(per_load, list):
        per_load = {"1": {"points": per_load}}
    setting = to_ship if to_ship is not None else chosen
    estimator = variant_estimator(document.policy.estimator, setting)
    policy: Policy = replace(document.policy, estimator=estimator)
    sweep = [("margin_ratio", tuple(float(m) for m in margins)), ("half_life_s", tuple(float(h) for h in half_lives))]
    if predictors:
        sweep.append(("predictor", tuple(predictors)))
    points = []
    for load, result in per_load.items():
        for p in result["points"]:
            points.append(CalibrationPoint(
                **{k: p[k] for k in ("margin_ratio", "half_life_s", *POINT_FIELDS)},
                predictor=str(p.get("predictor", ASYMMETRIC)), load_factor=float(load),
                oom_kills=float(p.get("oom_kills", 0.0)),
                production_cpu_core_hours=float(p.get("production_cpu_core_hours", 0.0))))
    shipped_at: tuple = ()
    if to_ship is not None:
        shipped_at = (("predictor", str(to_ship.get("predictor", ASYMMETRIC))),
                      ("margin_ratio", float(to_ship["margin_ratio"])), ("half_life_s", float(to_ship["half_life_s"])),
                      ("qualified", 1.0 if within else 0.0))
    calibration = Calibration(
        sweep=tuple(sweep), points=tuple(points),
        knee=(("margin_ratio", chosen["margin_ratio"]), ("half_life_s", chosen["half_life_s"])),
        shipped=shipped_at,
        tolerance=(("max_evictions_per_100_pod_hours", float(max_evictions)),
                   ("max_contention_share", float(max_contention_share))) if to_ship is not None else (),
    )
    metadata = PolicyMetadata(name=f"{document.metadata.name}-calibrated" if document.metadata.name else "calibrated",
                              version=1, created=created, source="calibration", calibration=calibration,
                              cluster=document.metadata.cluster)
    return PolicyDocument(policy=policy, metadata=metadata)
