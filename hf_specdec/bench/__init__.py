"""The benchmark harness and the offline-model builder, as importable code; `scripts/` only parses arguments.

This is the top layer: it may import anything in `hf_specdec`, and nothing in `hf_specdec` imports it. Optional
dependencies stay behind extras and are imported inside the functions that need them: matplotlib for the plots
(`pip install 'hf_specdec[bench]'`; without it the plots are skipped with a note) and gguf for building an offline
model (`pip install 'hf_specdec[offline-models]'`).

Each module's docstring says what it holds; `run` is the entry of scripts/benchmark.py.
"""
