"""DCOCO correction: the prefix-first walk over candidate transitions, and its drafting generator."""
