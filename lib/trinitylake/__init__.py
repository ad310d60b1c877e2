"""TrinityLake: reference Python implementation of the TrinityLake lakehouse format."""

__version__ = "0.1.0"
