"""Build hook: the top-level ``templates/`` and ``static/`` folders (the one place pages are
edited) are copied into ``kalena_web/`` of the built package, so a wheel alone renders the
console. Everything else about the build is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ASSETS = ("templates", "static")


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the top-level folders in place (kalena_web/settings.py)
        root = Path(__file__).resolve().parent
        for name in ASSETS:
            shutil.copytree(root / name, Path(self.build_lib) / "kalena_web" / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithAssets})
