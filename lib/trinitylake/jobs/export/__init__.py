"""The export job: `rules` (pure) and `job` (its phases)."""
