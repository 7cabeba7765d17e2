"""Kalena web: the Django operator console, control loops and command line."""
