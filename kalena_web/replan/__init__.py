"""Re-plan: drift between requests and steady reservations, recommendations a human approves
(docs/design.md §10), and the two-part export back to Kuberina (docs/design.md §3)."""
