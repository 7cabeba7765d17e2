"""Control: the live control plane's node conditions, loop locks and schedules (DESIGN §8)."""
