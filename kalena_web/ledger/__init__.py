"""Ledger: per-node request/reservation ledgers, slack, headroom and reclaimed capacity (docs/design.md §6)."""
