"""The lab's images, built here (no registry is reachable) and imported into a node's engine.

* ``kalena/busybox:test`` — busybox-static with one symlink per applet (what every engine of the
  lab has; pods whose image the lab does not have run their command in it).
* ``kalena/lab-burner:test`` — the same rootfs plus ``/bin/burner``, the lab's usage program
  (``agents/lab/burner/burner.c``, compiled with ``gcc -static -O2 -pthread``): production
  containers follow a usage series with it, batch containers do a fixed amount of work
  (:func:`agents.lab.kubelet.spec.container_command` says which annotation asks for what).

The compiled burner is cached under ``<cache dir>/burner-<sha256 of the source, 12 hex>``; the
image carries the same digest in its ``KALENA_BURNER_SHA`` environment variable, so a changed
source is rebuilt and re-imported and an unchanged one is left alone.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from agents.bench.dockerd import BUSYBOX, IMAGE as BUSYBOX_IMAGE, busybox_tar

BURNER_SOURCE = Path(__file__).resolve().parent / "burner" / "burner.c"
BURNER_IMAGE = "kalena/lab-burner:test"
GCC = "gcc"


class ImageError(RuntimeError):
    """The lab's images cannot be built (what is missing and how to get it)."""


def default_cache_dir() -> Path:
    """``$KALENA_VAR_DIR/lab-build`` when set, else ``var/lab-build`` of this checkout."""
    var = os.environ.get("KALENA_VAR_DIR")
    return Path(var) / "lab-build" if var else Path(__file__).resolve().parents[2] / "var" / "lab-build"


def source_digest() -> str:
    return hashlib.sha256(BURNER_SOURCE.read_bytes()).hexdigest()[:12]


def build_burner(cache_dir: Path | None = None) -> Path:
    """Compile the burner (static) unless the cache holds this source's build; returns its path.

    Raises:
        ImageError: gcc or the static C library is missing, or the build failed (its output).
    """
    cache_dir = Path(cache_dir or default_cache_dir())
    out = cache_dir / f"burner-{source_digest()}"
    if out.is_file():
        return out
    if shutil.which(GCC) is None:
        raise ImageError("gcc is missing: the lab's burner is compiled here (apt-get install gcc libc6-dev)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        built = Path(tmp) / "burner"
        run = subprocess.run([GCC, "-static", "-O2", "-pthread", "-o", str(built), str(BURNER_SOURCE)],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise ImageError(f"gcc -static failed for {BURNER_SOURCE}: {run.stderr.strip()[-800:]}")
        built.replace(out)
    return out


def burner_tar(burner: Path) -> bytes:
    """busybox's rootfs (:func:`agents.bench.dockerd.busybox_tar`) plus ``/bin/burner``."""
    buf = io.BytesIO(busybox_tar())
    out = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="r") as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        dst.add(str(burner), arcname="bin/burner")
    return out.getvalue()


def _has(client: Any, image: str, env: str | None = None) -> bool:
    try:
        found = client.images.get(image)
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        return False
    return env is None or env in (found.attrs.get("Config") or {}).get("Env") or []


def ensure_lab_images(client: Any, *, cache_dir: Path | None = None) -> list[str]:
    """Import ``kalena/busybox:test`` and ``kalena/lab-burner:test`` into the engine of ``client``
    (a ``docker.DockerClient``) where missing or stale; returns the images imported.

    Raises:
        ImageError: busybox-static or gcc missing, or the burner did not build.
    """
    if not Path(BUSYBOX).exists():
        raise ImageError(f"{BUSYBOX} is missing: the lab's images are busybox-static (apt-get install busybox-static)")
    imported = []
    if not _has(client, BUSYBOX_IMAGE):
        repo, tag = BUSYBOX_IMAGE.split(":")
        client.api.import_image_from_data(busybox_tar(), repository=repo, tag=tag, changes=['CMD ["/bin/sh"]'])
        imported.append(BUSYBOX_IMAGE)
    env = f"KALENA_BURNER_SHA={source_digest()}"
    if not _has(client, BURNER_IMAGE, env):
        repo, tag = BURNER_IMAGE.split(":")
        client.api.import_image_from_data(burner_tar(build_burner(cache_dir)), repository=repo, tag=tag,
                                          changes=['CMD ["/bin/burner"]', f"ENV {env}"])
        imported.append(BURNER_IMAGE)
    return imported
