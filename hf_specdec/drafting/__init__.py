"""Drafter architectures (config/modeling pairs) and what they read from the target."""
