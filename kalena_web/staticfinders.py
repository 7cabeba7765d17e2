"""A static-files finder that serves ``plotly.min.js`` from the installed plotly package.

The console draws its charts with plotly.js and there is no internet here, so the script is
served from the project's own static files (``{% static 'vendor/plotly.min.js' %}``): this
finder exposes exactly that one file of ``plotly/package_data`` to ``runserver``, WhiteNoise and
``collectstatic`` — nothing else from that folder (data sets, widget bundles) is published.
"""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage

PREFIX = "vendor"
FILENAME = "plotly.min.js"


class PlotlyJsFinder(BaseFinder):
    """Finds ``vendor/plotly.min.js`` in the plotly package's ``package_data`` folder."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.location = Path(plotly.__file__).resolve().parent / "package_data"
        self.storage = FileSystemStorage(location=self.location)
        self.storage.prefix = PREFIX

    def check(self, **kwargs):
        if not (self.location / FILENAME).is_file():
            return [Error(f"{self.location / FILENAME} is missing: the plotly package is incomplete",
                          id="kalena.E001")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs):
        """The absolute path of ``vendor/plotly.min.js`` (a list when ``find_all``), else nothing."""
        if path == f"{PREFIX}/{FILENAME}" and (self.location / FILENAME).is_file():
            found = str(self.location / FILENAME)
            return [found] if find_all else found
        return [] if find_all else None

    def list(self, ignore_patterns):
        """Yield ``(relative path, storage)`` for the one file this finder publishes."""
        if (self.location / FILENAME).is_file():
            yield FILENAME, self.storage
