"""``python -m kalena_web.cli`` runs the ``kalena`` command."""

import sys

from kalena_web.cli import main

sys.exit(main())
