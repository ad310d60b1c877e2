"""The expire job: `rules` (pure) and `job` (its phases)."""
