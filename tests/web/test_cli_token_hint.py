"""The hint `kalena batch --server` gives without a token names a command that exists as written
(an outside check followed the old hint, `kalena api-token create USER NAME`, and was refused).
"""

from __future__ import annotations

import re

import pytest

from kalena_web.cli import build_parser
from kalena_web.cli.remote import Client, RemoteError


def test_the_missing_token_hint_names_a_command_the_cli_accepts() -> None:
    with pytest.raises(RemoteError) as raised:
        Client("http://127.0.0.1:8000", None)
    hint = re.search(r"`kalena (api-token create [^`]+)`", str(raised.value))
    assert hint, str(raised.value)
    argv = hint.group(1).replace("USER", "demo").replace("NAME", "bench").split()
    args, unknown = build_parser().parse_known_args(argv)
    assert unknown == [] and args.name == "bench", (argv, unknown)
