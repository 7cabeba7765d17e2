"""Ledger: per-node request/reservation ledgers, slack, headroom and reclaimed capacity (DESIGN §6)."""
