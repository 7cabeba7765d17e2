"""Console: the operator pages (login required), figures and formatting."""
