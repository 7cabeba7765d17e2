"""The REST API (django-ninja): one ``NinjaAPI`` that mounts each app's router."""
