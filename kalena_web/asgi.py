"""ASGI entry point (Daphne: ``daphne kalena_web.asgi:application``)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")

application = get_asgi_application()
