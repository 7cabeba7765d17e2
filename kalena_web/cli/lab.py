"""``kalena lab up | status | down``: Kalena whole on this machine — nodes that are cgroup
subtrees with their own Docker engines and real agents, and a console (agents/lab/README.md,
docs/lab.md).

The nodes are :mod:`agents.lab`'s; this module is the console side: the lab's own SQLite
database (``<state dir>/console/``, whatever ``DATABASE_URL`` says), an empty live cluster named
after the lab whose nodes the console's Docker watch registers from the engine list, and one
agent token per node.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from kalena_web.cli import lab_run, lab_slice
from kalena_web.cli.argtypes import port
from kalena_web.cli.lab_kubernetes import add_kubernetes_arguments
from kalena_web.cli.paths import PROJECT_ROOT


def default_state_dir() -> Path:
    """``<state dir>/lab``: ``$KALENA_VAR_DIR``, else ``var/`` of a source checkout, else
    ``$XDG_STATE_HOME/kalena`` (the settings' state folder, read here before Django is set up
    because the lab chooses the console's database)."""
    if os.environ.get("KALENA_VAR_DIR"):
        return Path(os.environ["KALENA_VAR_DIR"]) / "lab"
    if (PROJECT_ROOT / "pyproject.toml").is_file():
        return PROJECT_ROOT / "var" / "lab"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "kalena" / "lab"


NODE_MIB = 256             # a node's memory by default …
KUBERNETES_NODE_MIB = 512  # … and in Kubernetes mode, where the agent's DaemonSet pod requests 128 MiB of it


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("lab", help="Kalena whole on this machine: cgroup nodes with engines and agents",
                                 description="N nodes, each a cgroup subtree whose cpu quota and memory limit are its "
                                             "capacity, with a private Docker engine, its own loopback address and a "
                                             "real kalena-agent, fed to a console started for the lab (docs/lab.md).")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the lab (refused when one is up, or when it does not fit the budget)")
    up.add_argument("--nodes", type=int, default=4, help="nodes (4)")
    up.add_argument("--cpu-m", type=int, default=250, help="each node's cpu in millicores: its cpu quota (250)")
    up.add_argument("--memory-mib", type=int, default=None,
                    help="each node's memory limit in MiB (256; Kubernetes mode 512: the agent's pod requests "
                         "128 MiB of each node and the slice takes what is left)")
    up.add_argument("--budget-ratio", type=float, default=0.5,
                    help="share of the machine's cores and memory the nodes may take together (0.5)")
    up.add_argument("--name", default="lab",
                    help="lab name: the live cluster, node names <name>-<i>, cgroups kalena-<name> (lab)")
    up.add_argument("--console-port", type=port, default=8470, help="the console's port on <subnet>.1 (8470)")
    up.add_argument("--subnet", default="127.0.0",
                    help="loopback /24 prefix: the console on <subnet>.1, node i on <subnet>.(i+1) (127.0.0); "
                         "two labs side by side need two subnets")
    up.add_argument("--managers", type=int, default=1, help="with --orchestrator swarm: how many nodes are managers (1)")
    up.add_argument("--sampling-interval-s", type=float, default=2.0, help="the agents' sampling interval (2 s)")
    up.add_argument("--machines-only", action="store_true",
                    help="the nodes (and with --orchestrator swarm, their Swarm) without the lab's console and agents: "
                         "machines to deploy deploy/compose or deploy/swarm onto (`kalena lab status` prints the "
                         "substitutions)")
    add_kubernetes_arguments(up)
    status = actions.add_parser("status", help="per node: engine, agent, cgroup usage, PSI beside the host's")
    down = actions.add_parser("down", help="stop everything the lab started and check nothing is left")
    play = actions.add_parser("play", help="Kubernetes mode: submit the slice's batch schedule at its arrival offsets",
                              description="Each arrival of the slice's batch-schedule.json created with `kubectl "
                                          "create -f` at its offset after the play starts (Kalena's webhook converts "
                                          "it, Kalena's scheduler places it); one progress line per arrival. "
                                          "Recorded in lab.json while it runs; `kalena lab down` stops it.")
    sliced = actions.add_parser("slice", help="render the lab's cluster from a Kuberina blueprint slice and real traces",
                                description="A few blueprint nodes mapped onto the lab's nodes, their production "
                                            "scaled to the lab with usage from Bitbrains series, batch sampled from "
                                            "the Alibaba 2018 trace at a load factor over the lab's slack, time "
                                            "compressed k times: Kubernetes manifests, Docker container specs, the "
                                            "slice's Kuberina IR, the batch schedule and a summary (docs/lab.md).")
    fault = actions.add_parser(
        "fault", help="inject one fault into the running lab and wait until it has recovered",
        description="agent-restart: SIGKILL a node's agent and start it again; leader-kill: SIGKILL the scheduler "
                    "Lease holder (Docker mode: the console, which runs the scheduling loops) and start it again; "
                    "engine-stop: stop a node's Docker engine for --for seconds and start it again; db-restart: the "
                    "lab's PostgreSQL database refuses connections for --for seconds with every open one terminated. "
                    "Appends one JSON line to <state dir>/faults.jsonl; exit 0 recovered, 1 not (naming what), 2 "
                    "bad input (docs/lab.md \"Faults\").")
    fault.add_argument("kind", metavar="KIND", help="agent-restart, leader-kill, engine-stop or db-restart")
    fault.add_argument("--node", default=None, help="the node (agent-restart, engine-stop; default the first)")
    fault.add_argument("--for", dest="for_s", type=float, default=None,
                       help="seconds the engine stays stopped / the database refuses connections (10 / 5)")
    fault.add_argument("--timeout-s", type=float, default=240.0, help="how long to wait for recovery (240)")
    check = actions.add_parser("check", help="the invariants: batch pods lost, double-bound, production evictions",
                               description="From the orchestrator, the nodes' engines and Kalena's database: batch "
                                           "pods lost (neither running, pending, completed nor failed with a "
                                           "record), bound twice, and production pods evicted; exit 1 if any.")
    check.add_argument("--json", action="store_true", help="the report as JSON")
    metrics = actions.add_parser("metrics", help="the proposal's live metrics 4, 5 and 7 from the lab's sampler",
                                 description="Metric 4 (share of runnable time waiting > 5 ms by node cpu "
                                             "utilisation, from schedstat), metric 5 (pressure signal → throttle or "
                                             "eviction latency) and metric 7 (batch completion-time inflation and "
                                             "throttled time per batch pod) over the last --since seconds.")
    metrics.add_argument("--since", type=float, default=None,
                         help="seconds back from now (default: since the lab started)")
    metrics.add_argument("-o", "--output", choices=("table", "json"), default="table")
    lab_slice.add_arguments(sliced)
    run = actions.add_parser("run", help="a lab day (Kubernetes mode, with its slice) measured against its replay",
                             description="Brings a lab up with the slice and the scaled policy, plays the day, "
                                         "collects the live figures, replays exactly the same slice on the simulated "
                                         "clock and prints each figure beside the replay's with live ÷ replay; "
                                         "summary JSON, an HTML report, the replay persisted as a lab run. Exit "
                                         "status 1 when a gate fails (docs/lab.md \"A measured day\").")
    lab_run.add_arguments(run)
    run.set_defaults(handler=lab_run.handle_run)
    sliced.set_defaults(handler=lab_slice.handle_slice)
    for p in (up, status, down, play, fault, check, metrics, run):
        p.add_argument("--state-dir", type=Path, default=None, help="the lab's state folder (<state dir>/lab)")
    status.add_argument("--json", action="store_true", help="the report as JSON")
    up.set_defaults(handler=handle_up)
    status.set_defaults(handler=handle_status)
    down.set_defaults(handler=handle_down)
    play.set_defaults(handler=handle_play)
    fault.set_defaults(handler=handle_fault)
    check.set_defaults(handler=handle_check)
    metrics.set_defaults(handler=handle_metrics)
    return parser


class DjangoConsole:
    """:class:`agents.lab.lab.ConsoleSide` over Django in this process, on the lab's database."""

    def __init__(self, *, state_dir: Path, engines: str, orchestrator: str = "docker") -> None:
        self.database = state_dir / "console" / "kalena.sqlite3"
        self.engines = engines
        self.orchestrator = orchestrator

    def serve_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATABASE_URL_FILE",
                                                               "REDIS_URL_FILE")}
        env.update(KALENA_DB_PATH=str(self.database), KALENA_ORCHESTRATOR=self.orchestrator,
                   KALENA_DOCKER_ENGINES=self.engines,
                   DJANGO_SETTINGS_MODULE="kalena_web.settings")
        return env

    def prepare(self, *, cluster: str) -> None:
        self.database.parent.mkdir(parents=True, exist_ok=True)
        env = self.serve_env()
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from kalena_web.control.services import live_cluster_create

        live_cluster_create(name=cluster)

    def tokens(self, *, cluster: str, nodes: list[str], timeout_s: float) -> dict[str, str]:
        from agents.lab.errors import LabError
        from kalena_web.inventory.models import Node
        from kalena_web.telemetry.services import agent_token_create

        end = time.monotonic() + timeout_s
        while True:
            rows = {n.name: n for n in Node.objects.filter(cluster__name=cluster, name__in=nodes)}
            if len(rows) == len(nodes):
                return {name: agent_token_create(node=rows[name])[0] for name in nodes}
            if time.monotonic() > end:
                missing = ", ".join(sorted(set(nodes) - set(rows)))
                raise LabError(f"the console's watch did not register node(s) {missing} within {timeout_s:.0f} s",
                               source="kalena serve", field="console")
            time.sleep(0.5)


def handle_up(args: argparse.Namespace) -> int:
    from agents.lab.budget import host_figures, lab_plan
    from agents.lab.lab import lab_up

    cores, memory = host_figures()
    if args.memory_mib is None:
        args.memory_mib = KUBERNETES_NODE_MIB if args.orchestrator == "kubernetes" else NODE_MIB
    plan = lab_plan(name=args.name, nodes=args.nodes, cpu_mcpu=args.cpu_m, memory_bytes=args.memory_mib * 2**20,
                    host_cores=cores, host_memory_bytes=memory, budget_ratio=args.budget_ratio, subnet=args.subnet)
    state_dir = (args.state_dir or default_state_dir()).resolve()
    if args.orchestrator == "kubernetes":
        from kalena_web.cli.lab_kubernetes import handle_up_kubernetes

        return handle_up_kubernetes(args, plan, state_dir)
    # swarm: the first engine is the first manager (the console's Swarm adapter asks it first)
    engines = ",".join(f"{n.name}=unix://{state_dir / 'nodes' / n.name / 'docker.sock'}" for n in plan.nodes)
    print(f"kalena lab: {len(plan.nodes)} node(s) × {args.cpu_m} m / {args.memory_mib} MiB = "
          f"{len(plan.nodes) * args.cpu_m} m / {len(plan.nodes) * args.memory_mib} MiB of the budget "
          f"{plan.cpu_budget_mcpu} m / {plan.memory_budget_bytes // 2**20} MiB; state in {state_dir}", flush=True)
    console = DjangoConsole(state_dir=state_dir, engines=engines, orchestrator=args.orchestrator)
    state = lab_up(plan, state_dir=state_dir, console=console, console_port=args.console_port,
                   sampling_interval_s=args.sampling_interval_s, say=lambda line: print(line, flush=True),
                   orchestrator=args.orchestrator, managers=args.managers, machines_only=args.machines_only)
    if not args.machines_only:
        from agents.lab.sampler import sampler_start

        sampler = sampler_start(state_dir)
        print(f"kalena lab: sampler pid {sampler['process']['pid']} writing {state_dir / 'metrics.jsonl'}")
    console_said = "no console or agents (--machines-only)" if args.machines_only else f"console {state['console']['url']}"
    print(f"kalena lab: up — {len(state['nodes'])} nodes, {console_said}; `kalena lab status` / `kalena lab down`")
    return 0


def _recorded(args: argparse.Namespace):
    from agents.lab.lab import recorded

    return recorded(args.state_dir or default_state_dir(), args.action)


def handle_status(args: argparse.Namespace) -> int:
    from agents.lab.status import format_status, lab_status

    _, state = _recorded(args)
    if state.get("orchestrator") == "kubernetes":
        from kalena_web.cli.lab_kubernetes import handle_status_kubernetes

        return handle_status_kubernetes(args, state)
    report = lab_status(state)
    print(json.dumps(report, indent=2) if args.json else format_status(report))
    kalena = not state.get("machines_only")   # --machines-only: no console or agents of the lab's own to check
    healthy = (report["console"]["alive"] or not kalena) and all(
        n["engine"]["answers"] and (n["agent"]["alive"] or not kalena)
        and (n.get("kubelet") is None or n["kubelet"]["alive"]) for n in report["nodes"])
    return 0 if healthy else 1


def handle_down(args: argparse.Namespace) -> int:
    from agents.lab.kubernetes import lab_down_kubernetes
    from agents.lab.lab import lab_down

    state_dir, state = _recorded(args)
    down = lab_down_kubernetes if state.get("orchestrator") == "kubernetes" else lab_down
    left = down(state_dir, say=lambda line: print(line, flush=True))
    if left:
        print(f"kalena lab: down, but {len(left)} thing(s) are left (listed above); run `kalena lab down` again")
        return 1
    print("kalena lab: down — no process, container, engine, cgroup, mount, socket or port of the lab is left")
    return 0


def handle_play(args: argparse.Namespace) -> int:
    from agents.lab.day import play

    state_dir, _ = _recorded(args)
    play(state_dir, say=lambda line: print(line, flush=True))
    return 0


def handle_fault(args: argparse.Namespace) -> int:
    from agents.lab.faults import run_fault

    record = run_fault(args.state_dir or default_state_dir(), args.kind, node=args.node, for_s=args.for_s,
                       timeout_s=args.timeout_s, say=lambda line: print(line, flush=True))
    took = record["ended_at"] - record["started_at"]
    where = f" on {record['node']}" if record["node"] else ""
    print(f"kalena lab fault {record['kind']}{where}: {'recovered' if record['recovered'] else 'NOT recovered'} "
          f"after {took:.1f} s — {record['detail']}")
    return 0 if record["recovered"] else 1


def handle_check(args: argparse.Namespace) -> int:
    from agents.lab.invariants import check, format_check, violations

    _, state = _recorded(args)
    report = check(state)
    print(json.dumps(report, indent=2) if args.json else format_check(report))
    return 1 if violations(report) else 0


def handle_metrics(args: argparse.Namespace) -> int:
    from agents.lab.errors import LabError
    from agents.lab.livemetrics import collect, format_metrics

    _, state = _recorded(args)
    if args.since is not None and not args.since > 0:
        raise LabError(f"--since {args.since} is not a positive number of seconds", source="kalena lab metrics",
                       field="--since", accepted="seconds back from now, > 0")
    until = time.time()
    since = until - args.since if args.since is not None else float(state.get("started_s") or 0.0)
    report = collect(state, since, until)
    print(json.dumps(report, indent=2) if args.output == "json" else format_metrics(report))
    return 0
