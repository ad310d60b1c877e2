"""The walk job: `rules` (pure) and `job` (its phases)."""
