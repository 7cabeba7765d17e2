"""Kalena engine: pure Python + numpy (DESIGN §1). No Django, network, clock or environment."""
