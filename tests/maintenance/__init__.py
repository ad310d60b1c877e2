"""Engine-agnostic maintenance logic (no Spark)."""
