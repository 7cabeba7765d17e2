"""The docs name only what exists: every ``kalena`` command, sub-command and flag the README and
``docs/*.md`` show in code (backticks or a fenced block) is one the command line's parsers accept,
and every ``KALENA_*`` setting they name is read somewhere in the code, the scripts or the deploy
files. A renamed flag or a dropped setting fails here, naming the file, the line and the name.

Also: ``docs/design.md`` exists, and no doc sends a newcomer to a file outside the repository
(``DESIGN.md``, ``STYLE.md``, the proposal's seeds):
the design they cite is ``docs/design.md``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kalena_web.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_DIRS = ("kalena_web", "kalena_engine", "agents", "scripts", "deploy", ".ci", "tests")
#: settings the docs may name although no code reads them, each with the reason
NOT_READ_BY_CODE: dict[str, str] = {}


def _code_spans(text: str) -> list[tuple[int, str]]:
    """(line number, code) for every inline code span and every line of a fenced block."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            out.append((number, line))
        else:
            out += [(number, span) for span in re.findall(r"`([^`]+)`", line)]
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def _resolve(words: list[str], parser: argparse.ArgumentParser) -> tuple[list[str], argparse.ArgumentParser, str]:
    """Walk ``words`` down the sub-commands: (the path taken, its parser, the first unknown
    sub-command or "")."""
    path = []
    for word in words:
        subs = _subparsers(parser)
        if not subs:
            break
        if word not in subs:
            return path, parser, word
        path.append(word)
        parser = subs[word]
    return path, parser, ""


def _problems_in(doc: Path, parser: argparse.ArgumentParser, root: Path = ROOT) -> list[str]:
    problems = []
    for number, code in _code_spans(doc.read_text()):
        # each command in the span: `kalena WORD…` up to a shell separator
        code = re.sub(r"#.*", "", code) if code.lstrip().startswith(("$", "kubectl", "pip", "docker", ".")) \
            or "  #" in code else code  # a shell comment is prose
        code = re.sub(r"(-n|--namespace)[ =]kalena\b", "", code)  # kubectl's namespace, not the command
        for part in re.split(r"\|\||&&|;|\||\$\(|\n", code):
            for match in re.finditer(r"(?<![\w./@:-])kalena((?: [a-z][a-z0-9-]*)+)(.*)", part):
                words = match.group(1).split()
                path, sub, unknown = _resolve(words, parser)
                where = f"{doc.relative_to(root)}:{number}"
                if not path:
                    if _subparsers(parser).get(words[0]) is None and words[0] not in ("is", "and", "or"):
                        problems.append(f"{where}: `kalena {words[0]}` is not a command")
                    continue
                if unknown and _subparsers(sub):
                    problems.append(f"{where}: `kalena {' '.join(path)} {unknown}` is not a command")
                    continue
                if _subparsers(sub):
                    continue  # `kalena lab` alone: no flags to check
                known = _options(sub)
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", match.group(2) + " "):
                    if flag not in known:
                        problems.append(f"{where}: `kalena {' '.join(path)}` has no flag {flag}")
    return problems


def test_every_kalena_command_and_flag_the_docs_show_exists() -> None:
    parser = build_parser()
    problems = [p for doc in DOCS for p in _problems_in(doc, parser)]
    assert not problems, "the docs name commands or flags the command line does not have:\n" + "\n".join(problems)


def _read_by_code() -> set[str]:
    names: set[str] = set()
    for d in CODE_DIRS:
        for path in (ROOT / d).rglob("*"):
            if path.is_file() and path.suffix not in (".md", ".json", ".png", ".sqlite3", ".gz", ".pyc") \
                    and "node_modules" not in path.parts:
                try:
                    names |= set(re.findall(r"KALENA_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="ignore")))
                except OSError:
                    continue
    return names


def test_every_setting_the_docs_name_is_read_by_the_code() -> None:
    known = _read_by_code() | set(NOT_READ_BY_CODE)
    problems = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for name in re.findall(r"KALENA_[A-Z0-9_]*[A-Z0-9]", line):
                if name not in known:
                    problems.append(f"{doc.relative_to(ROOT)}:{number}: {name}")
    assert not problems, "the docs name settings nothing reads:\n" + "\n".join(problems)


def test_the_design_doc_exists_and_no_doc_cites_files_outside_the_repository() -> None:
    assert (ROOT / "docs" / "design.md").is_file(), "docs/design.md is missing"
    outside = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if re.search(r"\bDESIGN\b|\bSTYLE\.md\b|\bseeds/", line):
                outside.append(f"{doc.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not outside, "docs cite files outside the repository:\n" + "\n".join(outside)


def test_no_docstring_or_page_cites_the_design_by_a_file_outside_the_repository() -> None:
    """Code, templates and scripts cite the design as docs/design.md §N, never DESIGN (§N, 's
    defaults, .md) or STYLE.md."""
    outside = []
    for top in ("agents", "kalena_engine", "kalena_web", "templates", "static", "deploy", "scripts"):
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix not in (".py", ".html", ".js", ".c", ".yaml", ".yml", ".sh", ""):
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if re.search(r"\bDESIGN\b|\bSTYLE\.md\b", line):  # also "DESIGN's defaults", "(DESIGN⏎§15"
                    outside.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not outside, "code cites files outside the repository:\n" + "\n".join(outside)


@pytest.mark.parametrize("line", ["`kalena batch get home --no-such-flag`", "`kalena nosuch`", "`kalena lab upp`"])
def test_the_check_catches_what_it_is_for(tmp_path: Path, line: str) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"# x\n\nRun {line} first, then `kalena batch get home -o wide`.\n")
    problems = _problems_in(doc, build_parser(), root=tmp_path)
    assert len(problems) == 1 and problems[0].startswith("doc.md:3: ")


def test_no_doc_runs_kustomize_edit_through_kubectl() -> None:
    """``kubectl kustomize`` only builds (kubectl 1.20 as current ones: ``kubectl kustomize DIR``);
    ``edit set image`` is the standalone ``kustomize`` binary's. deploy-kubernetes.md step 1
    sent a newcomer to ``kubectl kustomize edit set image …``, which kubectl refuses
    ("specify one path to a kustomization directory")."""
    wrong = [f"{doc.relative_to(ROOT)}:{number}" for doc in DOCS for number, code in _code_spans(doc.read_text())
             if re.search(r"\bkubectl kustomize\s+edit\b", code)]
    assert not wrong, "kubectl has no `kustomize edit`: " + ", ".join(wrong)
