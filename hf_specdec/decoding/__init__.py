"""Decoding: the generate() integration, acceptance statistics and the CPU hot-path fix."""
