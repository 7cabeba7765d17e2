"""PolicyVersion ⇄ engine types. The engine's :mod:`kalena_engine.policy_file` is the only
parser: a stored document is read back through it, never by hand."""

from __future__ import annotations

from typing import Any

from kalena_engine.policy_file import PolicyDocument, policy_from_document, policy_to_document
from kalena_web.policy.models import PolicyVersion


def version_document(row: PolicyVersion) -> PolicyDocument:
    """The stored file of ``row`` as the engine reads it (raises PolicyError only if the stored
    document no longer parses, which a migration of the format must prevent)."""
    return policy_from_document(row.document, source=f"policy version {row.version}")


def flat_spec(document: dict[str, Any]) -> dict[str, Any]:
    """``{"estimator.margin_ratio": 1.15, …, "namespaces.team-a": 40}`` of a file mapping's
    spec — the unit of the history diff and the audit's before/after."""
    out: dict[str, Any] = {}
    for section, body in (document.get("spec") or {}).items():
        for key, value in (body or {}).items():
            out[f"{section}.{key}"] = value
    return out


def spec_diff(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``[(dotted key, before, after)]`` for every key whose value differs (missing → None)."""
    a, b = flat_spec(before), flat_spec(after)
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def document_for_store(document: PolicyDocument, *, version: int, created: str, source: str) -> dict[str, Any]:
    """The file mapping stored for a new version (metadata rewritten to this version)."""
    from dataclasses import replace

    meta = replace(document.metadata, version=version, created=created, source=source)
    return policy_to_document(PolicyDocument(policy=document.policy, metadata=meta))


def calibration_document(row) -> PolicyDocument:
    """An imported calibration file as the engine reads it."""
    return policy_from_document(row.document, source=row.filename or f"calibration {row.id}")
