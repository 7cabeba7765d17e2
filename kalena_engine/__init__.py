"""Kalena engine: pure Python + numpy (docs/design.md §1). No Django, network, clock or environment."""
