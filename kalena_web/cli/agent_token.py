"""``kalena agent-token create CLUSTER NODE | list [CLUSTER [NODE]] | revoke ID``: per-node agent
tokens (stored hashed; the plaintext is printed once, by ``create``)."""

from __future__ import annotations

import argparse

from kalena_engine.errors import InputError
from kalena_web.cli.persist import django_setup


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("agent-token", help="per-node agent tokens: create, list, revoke",
                                 description="Node agents authenticate with a per-node bearer token. Only a hash "
                                             "is stored: `create` prints the token once.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a token for a node of a live cluster (printed once)")
    create.add_argument("cluster", help="live cluster name")
    create.add_argument("node", help="node name")
    create.set_defaults(handler=handle_create)
    listing = actions.add_parser("list", help="list tokens (prefix, node, created, revoked, last used)")
    listing.add_argument("cluster", nargs="?", help="only this live cluster")
    listing.add_argument("node", nargs="?", help="only this node")
    listing.set_defaults(handler=handle_list)
    revoke = actions.add_parser("revoke", help="revoke a token by id: new and open connections are refused")
    revoke.add_argument("id", type=int, help="token id (from `list`)")
    revoke.set_defaults(handler=handle_revoke)
    return parser


def handle_create(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.telemetry.selectors import NotFound, live_node_get
    from kalena_web.telemetry.services import agent_token_create

    try:
        node = live_node_get(cluster=args.cluster, node=args.node)
    except NotFound as exc:
        raise InputError(str(exc), field="node") from None
    plaintext, row = agent_token_create(node=node)
    print(f"token {row.id} for node {node.name!r} of {node.cluster.name!r} (shown once; store it as the agent's "
          f"--link-token-file or KALENA_AGENT_LINK_TOKEN):")
    print(plaintext)
    return 0


def handle_list(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.telemetry.selectors import tokens_list

    rows = list(tokens_list(cluster=args.cluster, node=args.node))
    print(f"{'id':>6}  {'prefix':<14} {'cluster':<16} {'node':<24} {'created (UTC)':<19}  {'state':<28} last used")
    for t in rows:
        state = "active" if t.revoked_at is None else f"revoked {t.revoked_at:%Y-%m-%d %H:%M:%S}"
        used = f"{t.last_used_at:%Y-%m-%d %H:%M:%S}" if t.last_used_at else "never"
        print(f"{t.id:>6}  {t.prefix + '…':<14} {t.node.cluster.name:<16} {t.node.name:<24} "
              f"{t.created_at:%Y-%m-%d %H:%M:%S}  {state:<28} {used}")
    print(f"{len(rows)} token(s)")
    return 0


def handle_revoke(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.telemetry.services import agent_token_revoke

    row = agent_token_revoke(token_id=args.id)
    print(f"token {row.id} ({row.prefix}…) of node {row.node.name!r} revoked")
    return 0
