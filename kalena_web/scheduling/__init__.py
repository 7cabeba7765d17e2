"""Scheduling: live batch pods, the scheduling loop and why-pending (docs/design.md §9)."""
