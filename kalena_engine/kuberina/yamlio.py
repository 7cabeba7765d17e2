"""YAML loading that keeps line numbers, so errors can say where a bad value sits.

``load_yaml(path)`` returns plain ``dict``/``list`` subclasses (:class:`LineDict`,
:class:`LineList`) that remember the 1-based line of each key or item. :class:`Where` walks
that tree alongside the reader and builds :class:`~kalena_engine.errors.IRError` messages of
the form ``file:line: field.path: problem (accepted: …)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kalena_engine.errors import IRError

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict):
    """A mapping that remembers where it and each of its keys start (1-based lines)."""

    line: int | None = None
    key_lines: dict[Any, int]


class LineList(list):
    """A sequence that remembers where it and each of its items start (1-based lines)."""

    line: int | None = None
    item_lines: list[int]


class _LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    pass


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise IRError(
                "a mapping key must be a scalar",
                source=str(getattr(loader, "name", "")), line=key_node.start_mark.line + 1,
            ) from None
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml(path: str | Path) -> Any:
    """Parse one YAML document, keeping line numbers.

    Raises:
        IRError: the file is missing, unreadable, not YAML, or empty.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IRError("file not found", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise IRError(f"cannot read file: {exc}", source=source) from None
    return parse_yaml(text, source=source)


def parse_yaml(text: str, *, source: str = "<string>") -> Any:
    """Parse YAML text (see :func:`load_yaml`); ``source`` names it in errors."""
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - safe loader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise IRError(
            f"not valid YAML: {exc.problem}", source=source,
            line=(mark.line + 1) if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise IRError(f"not valid YAML: {exc}", source=source) from None
    if data is None:
        raise IRError("the document is empty", source=source)
    return data


@dataclass(frozen=True)
class Where:
    """A position in a parsed document: the file, the dotted field path and the line."""

    source: str
    field: str = ""
    line: int | None = None

    def key(self, container: Mapping[str, Any], key: str) -> Where:
        """The position of ``container[key]`` (its line if the YAML recorded one)."""
        lines = getattr(container, "key_lines", {})
        line = lines.get(key, getattr(container, "line", None) or self.line)
        field = f"{self.field}.{key}" if self.field else str(key)
        return Where(self.source, field, line)

    def item(self, container: list[Any], index: int, label: str = "") -> Where:
        """The position of ``container[index]``; ``label`` (e.g. a name) is shown instead of the index."""
        lines = getattr(container, "item_lines", None)
        line = lines[index] if lines and index < len(lines) else self.line
        tag = f"[{label}]" if label else f"[{index}]"
        return Where(self.source, f"{self.field}{tag}", line)

    def error(self, problem: str, accepted: str = "") -> IRError:
        """Build (not raise) an :class:`IRError` at this position."""
        return IRError(problem, source=self.source, line=self.line, field=self.field, accepted=accepted)

    def expect_mapping(self, value: Any) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(f"expected a mapping, got {_kind(value)}")
        return value

    def expect_list(self, value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(f"expected a list, got {_kind(value)}")
        return value

    def expect_str(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(f"expected a non-empty string, got {_kind(value)}")
        return value

    def expect_keys(self, value: Mapping[str, Any], allowed: tuple[str, ...], hint: Mapping[str, str] | None = None) -> None:
        """Reject keys not in ``allowed`` (IR mappings are closed); ``hint`` maps a bad key to advice."""
        for key in value:
            if key not in allowed:
                where = self.key(value, key)
                advice = (hint or {}).get(key, "")
                problem = f"unknown key {key!r}" + (f"; {advice}" if advice else "")
                raise where.error(problem, accepted=", ".join(allowed))


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"
