"""Scheduling: live batch pods, the scheduling loop and why-pending (DESIGN §9)."""
