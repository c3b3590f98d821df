"""Decoding: the generate() integration (transformers' loop and hf_specdec's own), settings, statistics."""
