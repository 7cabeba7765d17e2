"""``manage.py demo_login``: create (or reset) the demo login and print it."""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = ("Create the console's demo user (or reset its password) and print the login. The password is "
            "random unless --password or $KALENA_DEMO_PASSWORD gives one.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="demo", help="user name (default demo)")
        parser.add_argument("--password", default=None, help="password (default: $KALENA_DEMO_PASSWORD or random)")

    def handle(self, *args, **options) -> None:
        username = options["username"]
        password = options["password"] or os.environ.get("KALENA_DEMO_PASSWORD") or _password()
        user, created = get_user_model().objects.get_or_create(username=username)
        user.set_password(password)
        user.is_active = True
        user.save()
        from django.contrib.auth.models import Group

        user.groups.add(*Group.objects.filter(name__in=("operator", "approver")))  # the demo may do everything
        self.stdout.write(f"{'created' if created else 'reset'} demo login  user: {username}  password: {password}")


def _password() -> str:
    """A random password that cannot be read as a command-line option (the demo passes it on to
    the lab's login as ``--password=…``; a leading ``-`` broke that once)."""
    while (password := secrets.token_urlsafe(9)).startswith("-"):
        pass
    return password
