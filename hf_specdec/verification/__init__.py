"""Verification: draft trees, tree masks and positions, and the acceptance rules (p target, q draft)."""
