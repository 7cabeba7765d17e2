"""Control: the live control plane's node conditions, loop locks and schedules (docs/design.md §8)."""
