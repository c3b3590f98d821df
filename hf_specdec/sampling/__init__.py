"""Sampling helpers: logits processed as plain sampling does, and DBLAST's dependent block sampler."""
