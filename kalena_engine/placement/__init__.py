"""Batch placement into the reservation ledger (DESIGN §6, §9)."""
