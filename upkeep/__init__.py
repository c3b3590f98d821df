"""Repository upkeep: code that maintains this repository (e.g. shipping a trained drafter into drafters/), run by
scripts/; not part of the hf_specdec package or its wheel."""
