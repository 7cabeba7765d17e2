"""Console pages. Each view parses its parameters, calls selectors, shapes with presenters and
figures, and renders; nothing else. Login is required by middleware (anonymous → login page).

Errors a user can cause answer with a page that says what was wrong: unknown run, node or task
→ 404; a bad query parameter → 400. Nothing is ever changed by a GET.
"""

from __future__ import annotations

from functools import wraps

from django.core.paginator import InvalidPage
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from kalena_web.archive import selectors
from kalena_web.archive.errors import NotFound
from kalena_web.archive.mappers import times_of
from kalena_web.console import figures, params, presenters, proposal_figures
from kalena_web.console.listing import ListSpec, listing
from kalena_web.console.why import reduction_text, rejection_lines
from kalena_web.ledger import selectors as ledger_selectors
from kalena_web.ledger.selectors import SORTS, BadSort


def error_page(request: HttpRequest, status: int, message: str) -> HttpResponse:
    """The console's error page for ``status`` carrying the user-facing ``message``."""
    title = {400: "Bad request", 403: "Forbidden", 404: "Not found", 409: "Conflict",
             413: "Request too large"}.get(status, "Error")
    return render(request, "console/error.html", {"status": status, "title": title, "message": message}, status=status)


def page(view):
    """GET only; turn a user's bad input into a 404 / 400 page carrying its message."""
    @require_GET
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except NotFound as exc:
            return error_page(request, 404, str(exc))
        except InvalidPage as exc:
            return error_page(request, 404, f"page: {exc}")
        except (params.BadParameter, BadSort) as exc:
            return error_page(request, 400, str(exc))
    return wrapper


RUN_NODES = ListSpec(
    search=("node__name", "node__zone"),
    filters={"nodes": {"all": Q(), "active": Q(node__active=True), "idle": Q(node__active=False),
                       "no_batch": Q(node__takes_batch=False), "with_evictions": Q(batch_evicted__gt=0)}},
    sorts={key: sort.fields + ("node__row",) for key, sort in SORTS.items()}, per_page=200)

BATCH_TASKS = ListSpec(
    search=("workload__name", "workload__owner"),
    filters={"show": selectors.BATCH_FILTERS}, labels={"never_placed": "never placed"},
    sorts={"arrival": ("workload__row",), "name": ("workload__name",), "pods": ("submitted",),
           "placed": ("placed",), "evicted": ("evicted",), "completed": ("completed",),
           "pending_at_end": ("pending_at_end",)}, per_page=100)


def _hours(run) -> float:
    return run.steps * run.step_s / 3600.0


@page
def home(request: HttpRequest) -> HttpResponse:
    """The runs; on a fresh install (no run, no live cluster) the live clusters page, which says
    how to import the first cluster."""
    from kalena_web.inventory.models import Cluster

    if not selectors.run_list().exists() and not Cluster.objects.filter(kind=Cluster.LIVE).exists():
        return redirect("console:live")
    return redirect("console:runs")


@page
def runs(request: HttpRequest) -> HttpResponse:
    """Every persisted run; pick two or more to compare."""
    return render(request, "console/runs.html", {"runs": list(selectors.run_list())})


@page
def overview(request: HttpRequest, run: str) -> HttpResponse:
    """A run's cluster overview: headline figures, reclaimed capacity over time, the nodes table."""
    the_run = selectors.run_get(name=run)
    sort_value = request.GET.get("sort") or "name"
    sort, descending = ledger_selectors.sort_parse(sort_value)
    nodes = listing(ledger_selectors.node_table(run=the_run, sort=sort, descending=descending), request.GET,
                    RUN_NODES)
    cluster = selectors.cluster_series(run=the_run)
    return render(request, "console/overview.html", {
        "run": the_run,
        "headline": presenters.headline(the_run.summary),
        "facts": presenters.run_facts(the_run),
        "reclaimed_figure": figures.reclaimed_figure(times_of(the_run, len(cluster["reclaimed_cpu"])), cluster,
                                                     hours=_hours(the_run)),
        "nodes": nodes.page, "listing": nodes,
        "sort": sort, "descending": descending, "sort_value": sort_value, "sort_label": SORTS[sort].label,
        "evictions": selectors.recent_evictions(run=the_run),
        "other_runs": [name for name in selectors.run_names() if name != the_run.name],
        "proposal": presenters.proposal_rows(the_run.summary),
        "proposal_figures": [(key, figures._to_json(fig))
                             for key, fig in proposal_figures.proposal_figures({the_run.name: the_run.summary})],
    })


@page
def node(request: HttpRequest, run: str, node: str) -> HttpResponse:
    """One node over the run: the four-series chart (plus requests) for cpu and ram, its ledger
    at a chosen moment, and the workloads on it then."""
    the_run = selectors.run_get(name=run)
    the_node = selectors.node_get(run=the_run, name=node)
    ts = selectors.node_series(run=the_run, node=the_node)
    tightest = selectors.tightest_step(ts)
    step = params.step_of(request.GET, steps=len(ts.times_s), step_s=the_run.step_s, start_s=the_run.start_s,
                          default=tightest)
    now_s = float(ts.times_s[step])
    evictions = selectors.node_evictions(node=the_node)
    batch = selectors.node_batch_at(run=the_run, node=the_node, step=step)
    ledger = getattr(the_node, "ledger", None)
    return render(request, "console/node.html", {
        "run": the_run, "node": the_node, "ledger": ledger, "step": step, "now_s": now_s, "tightest": tightest,
        "last_step": len(ts.times_s) - 1, "step_s": the_run.step_s,
        "nav": _step_nav(step, len(ts.times_s), the_run.step_s, tightest),
        "story": presenters.node_story(ts, ledger),
        "sentence": presenters.node_sentence(the_node, ts, ledger),
        "limits_are_requests": presenters.limits_equal_requests(ts),
        "at_rows": presenters.at_table(ts, step),
        "figure": figures.node_figure(ts, hours=_hours(the_run), at_s=now_s,
                                      evictions=[(e.time_s, f"{e.count} × {e.workload.name}") for e in evictions]),
        "pods": selectors.node_pods_at(run=the_run, node=the_node, step=step),
        "batch": [(b, presenters.placement_window(b.started_s, b.ends_s, now_s, the_run.step_s)) for b in batch],
        "evictions": [(e, presenters.eviction_why(e.detail, e.reason, e.count)) for e in evictions],
    })


def _step_nav(step: int, steps: int, step_s: float, tightest: int) -> list[tuple[str, int | None]]:
    hour = max(1, round(3600 / step_s))
    def clamp(s: int) -> int | None:
        return s if 0 <= s < steps else None
    return [("start", 0), ("−1 h", clamp(step - hour)), ("−1 step", clamp(step - 1)), ("+1 step", clamp(step + 1)),
            ("+1 h", clamp(step + hour)), ("end", steps - 1), ("tightest moment", tightest)]


@page
def task(request: HttpRequest, run: str, task: str) -> HttpResponse:
    """One batch task's lifecycle: submitted, placed where, evicted why (with the numbers),
    completed."""
    the_run = selectors.run_get(name=run)
    the_task = selectors.task_get(run=the_run, name=task)
    page_no = params.integer(request.GET, "page", default=1, low=1)
    events = selectors.task_events(task=the_task, page=page_no)
    timeline = selectors.task_timeline(run=the_run, task=the_task)
    outcome = getattr(the_task, "outcome", None)
    return render(request, "console/task.html", {
        "run": the_run, "task": the_task, "outcome": outcome, "events": events,
        "rows": [(e, presenters.eviction_why(e.detail, e.reason, e.count) if e.kind == "evicted" else None)
                 for e in events],
        "figure": figures.task_figure(times_of(the_run), timeline, hours=_hours(the_run),
                                      window_s=presenters.task_window(the_task, outcome, the_run)),
        "waited_s": (outcome.first_placed_s - the_task.arrival_s) if outcome and outcome.first_placed_s is not None else None,
        "why_pending": outcome.why_pending if outcome else None,
        "examples": rejection_lines(outcome.why_pending) if outcome and outcome.why_pending else [],
        "reduction": reduction_text(outcome.why_pending) if outcome and outcome.why_pending else "",
    })


@page
def batch(request: HttpRequest, run: str) -> HttpResponse:
    """The run's batch tasks with their outcomes, filterable and paged."""
    the_run = selectors.run_get(name=run)
    # the buttons read "never placed": accept it spelt as shown, joined, or with - or _
    spelt = {k.replace("_", ""): k for k in selectors.BATCH_FILTERS}
    query = request.GET.copy()
    if query.get("show"):
        query["show"] = spelt.get(query["show"].replace("_", "").replace("-", "").replace(" ", "").lower(),
                                  query["show"])
    tasks = listing(selectors.batch_outcome_rows(run=the_run), query, BATCH_TASKS)
    return render(request, "console/batch.html", {
        "run": the_run, "show": tasks.chosen["show"], "filters": list(selectors.BATCH_FILTERS),
        "outcomes": tasks.page, "listing": tasks})


@page
def compare(request: HttpRequest) -> HttpResponse:
    """Two to four runs side by side: headline figures and reclaimed share over time."""
    names = [n for n in request.GET.getlist("runs") if n]
    if len(names) != len(set(names)) or not 2 <= len(names) <= 4:
        raise params.BadParameter(f"compare needs 2 to 4 different runs (runs=A&runs=B), got {len(names)}: {', '.join(names) or 'none'}")
    the_runs = selectors.runs_get(names=names)
    series = selectors.cluster_series_many(runs=the_runs)
    return render(request, "console/compare.html", {
        "runs": the_runs,
        "rows": presenters.compare_rows(the_runs),
        "figure": figures.compare_figure([(r.name, times_of(r, len(series[r.id]["reclaimed_cpu"])), series[r.id])
                                          for r in the_runs]),
    })
