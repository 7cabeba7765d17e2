"""``kalena user add NAME --role R`` and ``kalena api-token create|list|revoke``: console
logins with their role (viewer, operator, approver; docs/design.md §12) and API tokens for automation."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import secrets

from kalena_engine.errors import InputError
from kalena_web.api.roles import ROLES
from kalena_web.cli.persist import django_setup

MIN_PASSWORD = 10


def add_parser(commands: argparse._SubParsersAction) -> None:
    user = commands.add_parser("user", help="console users and their roles")
    user_actions = user.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = user_actions.add_parser("add", help="create a user (or change its role and password)")
    add.add_argument("name")
    add.add_argument("--role", choices=sorted(ROLES), default="viewer",
                     help="viewer reads; operator also submits and deletes batch; approver also decides re-plans")
    add.add_argument("--password", help="password (default: $KALENA_PASSWORD, else prompted, else random)")
    add.set_defaults(handler=handle_user_add)

    token = commands.add_parser("api-token", help="API tokens (Authorization: Bearer) for automation")
    token_actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = token_actions.add_parser("create", help="create a token for a user; printed once")
    create.add_argument("user")
    create.add_argument("--name", default="automation", help="what the token is for")
    create.add_argument("--scope", action="append", choices=("read", "write", "approve"),
                        help="what the token may do within the user's role (repeatable; default: all; "
                             "read is always included)")
    create.set_defaults(handler=handle_token_create)
    listing = token_actions.add_parser("list", help="tokens (prefix, user, name, state)")
    listing.set_defaults(handler=handle_token_list)
    revoke = token_actions.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id", type=int)
    revoke.set_defaults(handler=handle_token_revoke)


def _user(name: str):
    from django.contrib.auth import get_user_model

    try:
        return get_user_model().objects.get(username=name)
    except get_user_model().DoesNotExist:
        raise InputError(f"no user named {name!r}", source="command line", field="user", accepted="a user made with `kalena user add`") from None


def handle_user_add(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"[\w.@+-]{1,150}", args.name):
        raise InputError(f"{args.name!r} is not a user name", source="command line", field="name",
                         accepted="1–150 letters, digits and @ . + - _")
    django_setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    password = args.password or os.environ.get("KALENA_PASSWORD")
    if not password:
        password = getpass.getpass(f"password for {args.name} (empty: random): ") if os.isatty(0) else ""
    shown = not password
    password = password or secrets.token_urlsafe(12)
    if len(password) < MIN_PASSWORD:
        raise InputError(f"the password has {len(password)} characters", source="command line", field="password",
                         accepted=f"at least {MIN_PASSWORD} characters, or none for a random one")
    user, created = get_user_model().objects.get_or_create(username=args.name)
    user.set_password(password)
    user.is_active = True
    user.save()
    user.groups.set(Group.objects.filter(name=args.role))
    from kalena_web.policy.audit import audit

    audit("user.add" if created else "user.change", target=args.name, after={"role": args.role, "active": True},
          actor_kind="user", actor=f"cli ({os.environ.get('USER', '?')})")
    print(f"{'created' if created else 'updated'} user {args.name} with role {args.role}"
          + (f"; password: {password}" if shown else ""))
    return 0


def handle_token_create(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.api.services import api_token_create

    scopes = args.scope or ("read", "write", "approve")
    token, row = api_token_create(user=_user(args.user), name=args.name, scopes=scopes)
    print(f"token {row.id} for {args.user} ({args.name}, scopes: {row.scopes}); shown once, keep it secret:\n{token}")
    return 0


def handle_token_list(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.api.models import ApiToken

    for row in ApiToken.objects.select_related("user"):
        state = "revoked" if row.revoked_at else "active"
        print(f"{row.id:>5}  {row.prefix}…  {row.user.get_username():<16} {row.name:<20} {state:<8} {row.scopes}")
    return 0


def handle_token_revoke(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.api.services import api_token_revoke

    if not api_token_revoke(token_id=args.id):
        raise InputError(f"no active token with id {args.id}", source="command line", field="id", accepted="an id from `kalena api-token list`")
    print(f"revoked token {args.id}")
    return 0
