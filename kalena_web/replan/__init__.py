"""Re-plan: drift between requests and steady reservations, recommendations a human approves
(DESIGN §10), and the two-part export back to Kuberina (DESIGN §3)."""
