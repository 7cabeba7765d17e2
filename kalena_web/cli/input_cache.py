"""The parsed-input cache of ``kalena replay`` and every ``kalena evaluate`` command.

Reading the traces and IR files is most of a short replay's time; the parsed
:class:`~kalena_engine.replay.ReplayInputs` are therefore kept under the state folder,
``<state>/cache/replay-inputs/<key>.pickle``, and reused when nothing they came from changed.

The key is a SHA-256 over

* the **content** of every file read (the IR files, every file of the Bitbrains folder, the
  Google shards, the batch trace; the GPU trace's folder and the GenAI archive for
  ``--cluster alibaba-gpu-2023``) and its path (the parsed objects name their file in later
  messages) — a touched file with the same bytes still hits, any changed byte misses;
* the **readers' version**: :data:`READER_VERSION` and the source text of the modules that
  parse the inputs (``kalena_engine/traces/``, ``kalena_engine/kuberina/``, the first-fit
  repack and this package's input loader), so a change to a reader invalidates every entry;
* the options that change what is read (cluster, batch format, machine size).

The cache is an optimisation only: an entry that cannot be read (truncated, another Python,
unpicklable) is ignored and rewritten, ``KALENA_INPUT_CACHE=0`` or ``--no-input-cache`` turns it
off, and deleting the folder changes no figure (tested). Entries are written whole or not at all
(a temporary file renamed into place), so concurrent commands never see half an entry; the
:data:`KEEP_ENTRIES` most recently used entries are kept, older ones removed.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

#: Bumped by hand when the cached object's shape changes in a way the source hashes would miss.
READER_VERSION = "1"
#: Environment switch: ``0`` disables the cache (reads every file, writes nothing).
CACHE_ENV = "KALENA_INPUT_CACHE"
#: Entries kept (the most recently used); an entry of the default inputs is ≈ 140 MB.
KEEP_ENTRIES = 4
_PROJECT = Path(__file__).resolve().parents[2]
_READER_SOURCES = ("kalena_engine/traces", "kalena_engine/kuberina", "kalena_engine/replay/compaction.py",
                   "kalena_engine/replay/setup.py", "kalena_web/cli/inputs.py", "kalena_web/cli/input_cache.py")


def state_dir() -> Path:
    """The state folder, as the console's settings choose it (``KALENA_VAR_DIR``; else
    ``<checkout>/var`` in a source checkout; else ``$XDG_STATE_HOME/kalena``) — without
    importing Django."""
    if os.environ.get("KALENA_VAR_DIR"):
        return Path(os.environ["KALENA_VAR_DIR"])
    if (_PROJECT / "pyproject.toml").is_file():
        return _PROJECT / "var"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "kalena"


def cache_dir() -> Path:
    """``<state>/cache/replay-inputs``."""
    return state_dir() / "cache" / "replay-inputs"


def enabled() -> bool:
    """False when ``KALENA_INPUT_CACHE`` is ``0`` (or ``false``/``no``/``off``)."""
    return os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _hash_file(digest, path: Path) -> None:
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)


def reader_fingerprint() -> str:
    """SHA-256 of :data:`READER_VERSION` and the readers' source text (module doc)."""
    digest = hashlib.sha256(f"kalena-inputs:{READER_VERSION}:{sys.version_info[:2]}".encode())
    for relative in _READER_SOURCES:
        root = _PROJECT / relative
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            if path.is_file():
                digest.update(str(path.relative_to(_PROJECT)).encode() + b"\0")
                _hash_file(digest, path)
    return digest.hexdigest()


def input_key(files: Iterable[tuple[str, Path]], options: dict[str, object]) -> str:
    """The cache key of reading ``files`` — ``(role, path)`` pairs; a folder stands for every
    file in it, by name — with ``options`` (module doc). A missing path hashes as missing, so
    the read that follows raises the reader's own error (never a cached one).
    """
    digest = hashlib.sha256(reader_fingerprint().encode())
    digest.update(repr(sorted(options.items())).encode())
    for role, path in files:
        path = Path(path)
        digest.update(f"\0{role}\0{path}\0".encode())  # the path too: messages name the file as given
        if path.is_dir():
            for child in sorted(p for p in path.iterdir() if p.is_file()):
                digest.update(child.name.encode() + b"\0")
                _hash_file(digest, child)
        elif path.is_file():
            _hash_file(digest, path)
        else:
            digest.update(b"<missing>")
    return digest.hexdigest()


def cached(key: str, build: Callable[[], object], *, use: bool = True) -> tuple[object, str]:
    """``(value, how)``: the entry for ``key`` if one is readable, else ``build()`` (then stored).

    ``how`` is ``hit``, ``miss`` (built and stored) or ``off`` (``use`` false or the
    environment switch: built, nothing stored). Errors of ``build`` propagate and store nothing.
    """
    if not (use and enabled()):
        return build(), "off"
    path = cache_dir() / f"{key}.pickle"
    try:
        with open(path, "rb") as handle:
            value = pickle.load(handle)
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        return value, "hit"
    except FileNotFoundError:
        pass
    except Exception:  # noqa: BLE001 - an unreadable entry is rebuilt; the cache is an optimisation only
        pass
    value = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(partial, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
        _prune(path.parent)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        try:
            partial.unlink(missing_ok=True)
        except (OSError, UnboundLocalError):
            pass
    return value, "miss"


def _prune(folder: Path) -> None:
    """Remove all but the :data:`KEEP_ENTRIES` most recently used entries of ``folder``."""
    keep = KEEP_ENTRIES
    entries = []
    for entry in folder.glob("*.pickle"):
        try:
            entries.append((entry.stat().st_mtime, entry))
        except OSError:
            continue
    for _, entry in sorted(entries, reverse=True)[keep:]:
        try:
            entry.unlink()
        except OSError:
            pass
