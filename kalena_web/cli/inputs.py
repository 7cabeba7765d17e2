"""Load every file a replay reads, with progress, into :class:`ReplayInputs`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
from kalena_engine.replay import ReplayInputs
from kalena_engine.replay.compaction import ffd_blueprint
from kalena_engine.traces.alibaba_gpu import load_gpu_cluster
from kalena_engine.traces.alibaba import read_batch_task
from kalena_engine.traces.bitbrains import load_bitbrains
from kalena_engine.traces.genai import load_memory_util
from kalena_engine.traces.google import batch_tasks_from_events, production_peak_ratios, read_task_events, read_task_usage
from kalena_web.cli import input_cache
from kalena_web.cli.argtypes import POSITIVE
from kalena_web.cli.paths import SAMPLE_DATA, data_path, data_root

DEFAULTS = {
    "infra": "kuberina/irina-186-3d/irina_infra.yaml",
    "workloads": "kuberina/irina-186-3d/irina_workloads.yaml",
    "blueprint": "kuberina/irina-186-3d/kuberina_solution.yaml",
    "usage_dir": "traces/bitbrains-rnd-2013-7",
    "batch_trace": "traces/alibaba-2018/batch_task-first50000.csv.gz",
    "google_events": "traces/google-2011/task_events-part-00000-of-00500.csv.gz",
    "google_usage": "traces/google-2011/task_usage-part-00000-first10000.csv.gz",
}
#: ``--cluster`` choices: the Kuberina Irina testbed (the IR files) or the Alibaba GPU trace
#: 2023 mapped as docs/traces.md says (its folder under the data root).
CLUSTERS = {"irina": None, "alibaba-gpu-2023": "traces/alibaba-gpu-2023"}
#: Production memory of the alibaba-gpu-2023 cluster (docs/traces.md).
GENAI_MEMORY = "traces/alibaba-genai-2026/pod_memory_util_anon.tar.gz"


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags naming the input files (relative paths resolve under the data folder)."""
    group = parser.add_argument_group("inputs (relative paths resolve under $KALENA_DATA_DIR or ../shared/data)")
    group.add_argument("--cluster", choices=tuple(CLUSTERS), default="irina",
                       help="irina: the Kuberina IR files below; alibaba-gpu-2023: that trace's nodes and pods "
                            "(non-BE as production placed by first-fit, BE as batch; --infra/--workloads/--blueprint/"
                            "--batch-trace are then unused; docs/traces.md)")
    group.add_argument("--infra", default=DEFAULTS["infra"], help="Kuberina infrastructure file")
    group.add_argument("--workloads", default=DEFAULTS["workloads"], help="Kuberina workloads file")
    group.add_argument("--blueprint", default=DEFAULTS["blueprint"], help="Kuberina solution (blueprint) file")
    group.add_argument("--usage-dir", default=DEFAULTS["usage_dir"], help="Bitbrains VM series folder")
    group.add_argument("--batch-trace", default=DEFAULTS["batch_trace"],
                       help="batch arrivals: Alibaba 2018 batch_task, or Google 2011 task_events")
    group.add_argument("--batch-format", choices=("auto", "alibaba", "google"), default="auto",
                       help="format of --batch-trace (auto: by file name)")
    group.add_argument("--google-events", default=DEFAULTS["google_events"],
                       help="Google 2011 task_events shard (production peak ratios)")
    group.add_argument("--google-usage", default=DEFAULTS["google_usage"],
                       help="Google 2011 task_usage rows (production peak ratios)")
    group.add_argument("--machine-ram-gib", type=POSITIVE, default=None,
                       help="memory of the machine the batch trace's memory is normalised to "
                            "(GiB; default Alibaba 512, Google 64 — see docs/traces.md)")
    group.add_argument("--machine-cores", type=POSITIVE, default=None,
                       help="cores of the machine Google requests are normalised to (default 32)")
    group.add_argument("--no-input-cache", action="store_true",
                       help="read every file again and leave the parsed-input cache (<state>/cache/replay-inputs, "
                            "keyed by the files' content) alone; the figures are the same either way")


def warn_unresolved(workloads) -> None:
    """Print every affinity / anti-affinity target of ``workloads`` that matched no pod or
    declaration, one line each naming the file and the pod (docs/design.md §3), to stderr."""
    for unresolved in workloads.unresolved:
        print(f"kalena: warning: {unresolved} (the term is ignored for placement)", file=sys.stderr)


def _batch_format(args: argparse.Namespace, batch_path: Path) -> str:
    """``alibaba``, ``google`` or ``gpu-trace``: how the batch arrivals are read."""
    if CLUSTERS.get(getattr(args, "cluster", "irina")) is not None:
        return "gpu-trace"
    if args.batch_format == "auto":
        return "google" if "task_events" in Path(batch_path).name else "alibaba"
    return args.batch_format


def input_files(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file or folder :func:`load_inputs` reads for ``args``."""
    cluster = CLUSTERS.get(getattr(args, "cluster", "irina"))
    files: list[tuple[str, Path]] = []
    if cluster is None:
        files += [(k, data_path(getattr(args, k))) for k in ("infra", "workloads", "blueprint")]
    else:
        files += [("cluster", data_path(cluster)), ("memory", data_path(GENAI_MEMORY))]
    files += [("usage_dir", data_path(args.usage_dir)), ("google_events", data_path(args.google_events)),
              ("google_usage", data_path(args.google_usage))]
    if cluster is None:
        files.append(("batch_trace", data_path(args.batch_trace)))
    return files


def load_inputs(args: argparse.Namespace, *, progress: bool = True) -> ReplayInputs:
    """Read the IR files and traces named by ``args`` — from the parsed-input cache when none of
    them changed since a command last read them (:mod:`kalena_web.cli.input_cache`; the result
    is the same object either way), unless ``--no-input-cache``.

    Raises:
        IRError, TraceError: a file is missing or malformed (nothing is half-loaded, nothing cached).
    """
    if data_root() == SAMPLE_DATA:
        print(f"kalena: ../shared/data not found and KALENA_DATA_DIR unset: using the bundled demo "
              f"sample {SAMPLE_DATA} (see its README)", file=sys.stderr)
    if CLUSTERS.get(getattr(args, "cluster", "irina")) is None and args.blueprint == DEFAULTS["blueprint"] \
            and args.workloads != DEFAULTS["workloads"]:
        print(f"kalena: no --blueprint given: the workloads {args.workloads} are paired with the default "
              f"blueprint {data_path(args.blueprint)} (made for {DEFAULTS['workloads']})", file=sys.stderr)
    options = {"cluster": getattr(args, "cluster", "irina"), "batch_format": _batch_format(args, data_path(args.batch_trace)),
               "machine_ram_gib": args.machine_ram_gib, "machine_cores": args.machine_cores,
               "same_events": data_path(args.batch_trace) == data_path(args.google_events)}
    use = not getattr(args, "no_input_cache", False)
    key = input_cache.input_key(input_files(args), options) if use and input_cache.enabled() else ""
    inputs, how = input_cache.cached(key, lambda: _read_inputs(args, progress=progress), use=use)
    if how == "hit":   # a fresh read warned as it read the workloads (before a blueprint could refuse them)
        warn_unresolved(inputs.workloads)
    return inputs  # type: ignore[return-value]


def _read_inputs(args: argparse.Namespace, *, progress: bool = True) -> ReplayInputs:
    """Read every file named by ``args`` (no cache)."""
    steps = tqdm(total=5, desc="loading inputs", unit="file set", disable=not progress, leave=False)
    cluster = CLUSTERS.get(getattr(args, "cluster", "irina"))
    gpu_batch = None
    memory = None
    if cluster is None:
        infra = load_infrastructure(data_path(args.infra))
        workloads = load_workloads(data_path(args.workloads))
        warn_unresolved(workloads)
        blueprint = load_blueprint(data_path(args.blueprint), workloads)
    else:
        infra, workloads, gpu_batch, _ = load_gpu_cluster(data_path(cluster))
        blueprint = ffd_blueprint(infra, workloads)
        memory = load_memory_util(data_path(GENAI_MEMORY))
    steps.update(1)
    files = tqdm(desc="bitbrains series", unit="file", disable=not progress, leave=False)

    def on_file(done: int, total: int) -> None:
        files.total = total
        files.n = done
        files.refresh()

    bitbrains = load_bitbrains(data_path(args.usage_dir), on_file=on_file)
    files.close()
    steps.update(1)
    events = read_task_events(data_path(args.google_events))
    steps.update(1)
    ratios = production_peak_ratios(events, read_task_usage(data_path(args.google_usage)))
    steps.update(1)
    batch_path = data_path(args.batch_trace)
    machine = {}
    if args.machine_ram_gib is not None:
        machine["machine_ram_bytes"] = args.machine_ram_gib * 2**30
    fmt = _batch_format(args, batch_path)
    if fmt == "google":
        batch_events = events if batch_path == data_path(args.google_events) else read_task_events(batch_path)
        if args.machine_cores is not None:
            machine["machine_cores"] = args.machine_cores
        batch = batch_tasks_from_events(batch_events, **machine)
    elif fmt == "gpu-trace":
        batch = gpu_batch
    else:
        batch = read_batch_task(batch_path, **machine)
    steps.update(1)
    steps.close()
    anomalies: dict[str, int] = {}
    # batch tables built from the same task_events already carry that file's anomalies
    parts = (bitbrains.anomalies, batch.anomalies) if batch.source == events.source else (
        bitbrains.anomalies, events.anomalies, batch.anomalies)
    if memory is not None:
        parts = (*parts, memory.anomalies)
    for part in parts:
        for kind, n in part.items():
            anomalies[kind] = anomalies.get(kind, 0) + n
    if workloads.unresolved:
        anomalies["kuberina.unresolved_affinity_target"] = len(workloads.unresolved)
    return ReplayInputs(infra=infra, workloads=workloads, blueprint=blueprint, bitbrains=bitbrains,
                        batch=batch, peak_ratios=ratios.ratios, anomalies=anomalies, memory_util=memory)
