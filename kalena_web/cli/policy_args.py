"""``--policy FILE`` and the flags an operator sweeps, for ``kalena replay`` and ``kalena
evaluate policies``. The file is read here and parsed by the engine's one parser
(:mod:`kalena_engine.policy_file`); each flag overrides the file's value and is checked by the
same parser, so a flag out of range is refused naming the flag, before any input loads."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from kalena_engine.errors import PolicyError
from kalena_engine.policy_file import (
    API_VERSION, KIND, PolicyDocument, parse_policy_text, policy_from_document, policy_to_document,
)

#: (flag, spec section, field) — the values an operator sweeps (docs/design.md §10 calibration).
OVERRIDES: tuple[tuple[str, str, str], ...] = (
    ("margin-ratio", "estimator", "margin_ratio"),
    ("half-life-s", "estimator", "half_life_s"),
    ("grace-s", "estimator", "grace_s"),
    ("limit-ratio", "estimator", "limit_ratio"),
    ("evict-threshold-ratio", "eviction", "evict_threshold_ratio"),
)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """``--policy`` and one flag per :data:`OVERRIDES` entry."""
    group = parser.add_argument_group("policy (docs/design.md §10 policy file; flags override the file)")
    group.add_argument("--policy", type=Path, metavar="FILE",
                       help="policy file (YAML or JSON, apiVersion kalena.naughtian.io/v1, kind Policy)")
    for flag, section, key in OVERRIDES:
        group.add_argument(f"--{flag}", type=_number, dest=key, metavar="X",
                           help=f"spec.{section}.{key} (overrides the file)")


def read_policy_file(path: Path) -> PolicyDocument:
    """Read and parse one policy file.

    Raises:
        PolicyError: missing, unreadable or refused by the parser (file, line and key named).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError("file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read file: {exc}", source=str(path)) from None
    return parse_policy_text(text, source=str(path))


def policy_from_args(args: argparse.Namespace) -> PolicyDocument:
    """The policy the command runs with: the file (or the defaults), then each flag given.

    Raises:
        PolicyError: the file or a flag is refused.
    """
    document = read_policy_file(args.policy) if getattr(args, "policy", None) else PolicyDocument()
    policy = document.policy
    for flag, section, key in OVERRIDES:
        value = getattr(args, key, None)
        if value is None:
            continue
        checked = policy_from_document({"apiVersion": API_VERSION, "kind": KIND, "spec": {section: {key: value}}},
                                       source=f"--{flag}")
        policy = replace(policy, **{section: replace(getattr(policy, section), **{key: getattr(getattr(checked.policy, section), key)})})
    merged = replace(document, policy=policy)
    # cross-field rules (e.g. acute_ratio ≥ evict_threshold_ratio) once more on the result
    return policy_from_document(policy_to_document(merged), source=str(args.policy) if getattr(args, "policy", None)
                                else "command line")


def policy_or_exit(args: argparse.Namespace, command: str) -> PolicyDocument:
    """:func:`policy_from_args`; a refusal prints ``kalena <command>: error: …`` on stderr and
    exits 2, as a malformed input file does."""
    try:
        return policy_from_args(args)
    except PolicyError as exc:
        print(f"kalena {command}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
