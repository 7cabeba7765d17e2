"""``python -m agents.lab.kubelet``: one node's kubelet double (package README)::

    python -m agents.lab.kubelet --node NAME --api-server URL [--token-file F] --docker-host unix://SOCK \\
        --cgroup-parent CGROUP --address IP --port PORT --cpu-m M --memory-bytes B

Exits 2 with a message on bad input or when the API server, the engine or the cgroups cannot be
used at start; runs until SIGTERM or SIGINT (then stops its loops; the pods' containers stay, as
when a kubelet stops — ``kalena lab down`` removes them with the engine).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m agents.lab.kubelet", description="the lab's kubelet double for one node")
    p.add_argument("--node", required=True, help="the Node's name")
    p.add_argument("--api-server", required=True, help="the API server's URL, e.g. http://127.0.0.1:6443")
    p.add_argument("--token-file", help="bearer token for the API server")
    p.add_argument("--ca-file", help="CA bundle for an https API server")
    p.add_argument("--docker-host", required=True, help="the node's engine, unix:///…/docker.sock")
    p.add_argument("--cgroup-parent", required=True,
                   help="the node's subtree relative to each cgroup hierarchy (kalena-lab/lab-1); pods go under <it>/kubepods")
    p.add_argument("--address", required=True, help="the node's InternalIP; the read API listens there")
    p.add_argument("--port", type=int, default=10250, help="the read API's port (daemonEndpoints.kubeletEndpoint)")
    p.add_argument("--cpu-m", type=int, required=True, help="the node's cpu capacity in millicores")
    p.add_argument("--memory-bytes", type=int, required=True, help="the node's memory capacity in bytes")
    p.add_argument("--max-pods", type=int, default=110)
    p.add_argument("--heartbeat-s", type=float, default=10.0, help="node status update period")
    p.add_argument("--sync-s", type=float, default=1.0, help="pod sync period")
    p.add_argument("--no-images", action="store_true", help="do not build the lab's images into the engine")
    args = p.parse_args(argv)
    problems = []
    if args.cpu_m <= 0:
        problems.append(f"--cpu-m {args.cpu_m}: must be > 0")
    if args.memory_bytes <= 0:
        problems.append(f"--memory-bytes {args.memory_bytes}: must be > 0")
    if not 0 <= args.port <= 65535:
        problems.append(f"--port {args.port}: must be 0…65535")
    if not args.docker_host.startswith(("unix://", "tcp://")):
        problems.append(f"--docker-host {args.docker_host!r}: expected unix:///path or tcp://host:port")
    if args.token_file and not Path(args.token_file).is_file():
        problems.append(f"--token-file {args.token_file}: no such file")
    if problems:
        p.error("; ".join(problems))
    return args


def api_client(url: str, token_file: str | None, ca_file: str | None):  # type: ignore[no-untyped-def]
    from kubernetes import client

    config = client.Configuration()
    config.host = url.rstrip("/")
    if token_file:
        config.api_key = {"authorization": "Bearer " + Path(token_file).read_text().strip()}
    if ca_file:
        config.ssl_ca_cert = ca_file
    return client.ApiClient(config)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s kubelet[{args.node}] %(levelname)s %(message)s")
    from agents.lab.kubelet.kubelet import Kubelet
    from agents.lab.kubelet.readapi import ReadAPI
    from agents.lab.kubelet.runtime import NodeRuntime

    try:
        runtime = NodeRuntime(args.docker_host, args.cgroup_parent)
        runtime.docker.ping()
        if not args.no_images:
            from agents.lab.images import ensure_lab_images

            ensure_lab_images(runtime.docker)
        kubelet = Kubelet(node=args.node, api=api_client(args.api_server, args.token_file, args.ca_file),
                          runtime=runtime, address=args.address, port=args.port, cpu_mcpu=args.cpu_m,
                          memory_bytes=args.memory_bytes, max_pods=args.max_pods, heartbeat_s=args.heartbeat_s,
                          sync_s=args.sync_s)
        read_api = ReadAPI(kubelet, args.address, args.port)
        kubelet.start()
        read_api.start()
    except Exception as exc:  # noqa: BLE001 - any start failure is reported and exits 2
        print(f"kubelet double for {args.node}: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    read_api.stop()
    kubelet.stop()
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
