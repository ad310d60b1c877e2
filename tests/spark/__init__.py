"""Spark maintenance jobs on a local session."""
