"""The orphans job: `rules` (pure) and `job` (its phases)."""
