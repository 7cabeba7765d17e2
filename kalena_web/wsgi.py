"""WSGI entry point, for servers that speak WSGI only."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")

application = get_wsgi_application()
