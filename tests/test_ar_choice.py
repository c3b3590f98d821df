"""The per-block choice of how many sampled drafts get a drafter pass of their own (`models/pard/ar_choice.py`)."""

from __future__ import annotations

from hf_specdec.models.pard.ar_choice import (
    MARGIN,
    MAX_PROBE_EVERY,
    PROBE_EVERY,
    RECENT,
    TRIED,
    ArChoice,
    choice_of,
    choices,
)


def run(choice: ArChoice, rates: dict, steps: int) -> list:
    """`steps` choices, each step realizing rates[m] tokens per second (one-second steps; "plain": 2 unless given)."""
    picked = []
    for _ in range(steps):
        m = choice.choose()
        choice.learn(m, rates.get(m, 2.0) if m == "plain" else rates[m], 1.0)
        picked.append(m)
    return picked


def test_every_count_is_tried_then_the_best_rate_wins_with_probes_of_the_others():
    choice = ArChoice(largest=3)
    picked = run(choice, {1: 3.0, 2: 4.5, 3: 4.0}, 64)
    assert picked[: 4 * TRIED] == [1] * TRIED + [2] * TRIED + [3] * TRIED + ["plain"] * TRIED
    after = "".join("p" if m == "plain" else str(m) for m in picked[4 * TRIED :])
    probes = [run for run in after.split("2") if run]  # the best except on probes
    assert probes and all(run in ("11", "33", "p") for run in probes)  # a drafting probe catches up, then is judged


def test_a_change_of_text_moves_the_choice_within_the_recent_window():
    choice = ArChoice(largest=2)
    run(choice, {1: 3.0, 2: 5.0}, 40)
    picked = run(choice, {1: 3.0, 2: 2.0}, RECENT * PROBE_EVERY)  # m = 2 stops paying
    assert picked[-PROBE_EVERY:].count(1) >= PROBE_EVERY - 1  # all but at most one probe of m = 2 or plain


def test_steps_without_time_are_not_judged_and_the_memory_lives_on_the_drafter():
    choice = ArChoice(largest=2)
    choice.learn(2, 9, 0.0)
    assert choice.rate(2) == 0.0 and choice.choose() == 1

    class Drafter:
        pass

    drafter = Drafter()
    first = choice_of(drafter, 3)
    assert choice_of(drafter, 3) is first and choice_of(drafter, 2) is not first


def test_long_chains_are_tried_at_a_few_counts_not_every_one():
    assert choices(1) == [1] and choices(4) == [1, 2, 3, 4]
    assert choices(12) == [1, 2, 3, 4, 6, 9, 12] and choices(20) == [1, 2, 3, 4, 6, 9, 13, 20]
    choice = ArChoice(largest=12)
    picked = run(choice, {m: 1.0 + m / 10 for m in choices(12)}, 3 * TRIED * 8)
    assert set(picked) == {*choices(12), "plain"} and picked[-1] == 12


def test_with_a_base_chain_the_choice_is_base_or_plain_and_plain_wins_where_chains_do_not_pay():
    """With a base-LM chain the adapter's counts are not among the choices (docs/verification.md 1.4): a chain is
    tried first, then plain steps; the chain runs between probes where it pays, plain steps where it does not."""
    choice = ArChoice(largest=2, base=True)
    assert choice.options == ["base", "plain"]
    picked = run(choice, {"base": 6.0}, 40)
    assert picked[: 2 * TRIED] == ["base"] * TRIED + ["plain"] * TRIED
    after = picked[2 * TRIED :]
    assert after.count("plain") == 1  # its probe at step 16 lost clearly: the next is due 32 steps later
    losing = ArChoice(largest=2, base=True)
    picked = run(losing, {"base": 1.0, "plain": 4.0}, 64)  # chains do not pay: plain steps, base on probes
    after = picked[2 * TRIED :]
    assert after.count("plain") >= len(after) - len(after) // PROBE_EVERY - 1


def test_noisy_rates_do_not_move_the_current_choice_but_a_clear_win_does():
    choice = ArChoice(largest=1, base=True)  # options: "base", "plain"
    for c in [1, 9, 2, 8, 1, 9]:  # base-LM chains: 5 tokens a second on average, noisy
        choice.learn("base", c, 1.0)
    for _ in range(TRIED):
        choice.learn("plain", 1, 0.18)  # plain steps: 5.6 tokens a second
    assert choice.rate("plain") > choice.rate("base") and choice.rate_error("base") > 0
    choice.steps = 1  # not a probe step
    assert choice.choose() == "base"  # plain's lead (0.6 tok/s) is well inside the chains' noise
    for _ in range(8):
        choice.learn("plain", 1, 0.05)  # now plain steps commit far more per second, beyond MARGIN standard errors
    noise = (choice.rate_error("base") ** 2 + choice.rate_error("plain") ** 2) ** 0.5
    assert choice.rate("plain") - choice.rate("base") > MARGIN * noise
    assert choice.choose() == "plain" and choice.current == "plain"


def test_probes_of_a_choice_that_loses_clearly_grow_rarer_and_come_back_when_it_does_not():
    """On a machine where base-LM chains commit under half of plain steps' rate, each probe of "base" doubles the
    steps to the next, up to `MAX_PROBE_EVERY`; a probe that does not lose clearly sets them back."""
    choice = ArChoice(largest=2, base=True)
    picked = run(choice, {"base": 2.0, "plain": 5.0}, 2 * TRIED + 400)
    probes = [i for i, m in enumerate(picked, start=1) if m == "base"][TRIED:]
    starts = [i for i in probes if i - 1 not in probes]
    assert all(i + 1 in probes for i in starts) and len(probes) == 2 * len(starts)  # each probe: two steps
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]  # counted from a probe's judged step
    assert starts[0] == PROBE_EVERY and gaps == [33, 65, 129, 129][: len(gaps)] and len(gaps) >= 3
    assert choice.every == MAX_PROBE_EVERY
    while choice.choose() != "base":
        choice.learn("plain", 5.0, 1.0)
    choice.learn("base", 1.0, 1.0)  # the text changed: chains now pay, but the probe's first step caught up
    assert choice.every == MAX_PROBE_EVERY and choice.choose() == "base"
    choice.learn("base", 5.2, 1.0)
    assert choice.every == PROBE_EVERY  # the probe did not lose clearly: probes as usual


def test_a_probe_is_judged_on_its_step_after_the_catch_up():
    """A probe's first step catches the base LM up on the tokens committed since its last chain (or reads the
    prompt): a cost that grows with the steps between probes and that no chain pays once chains are current. It
    sets nothing; the step after it is the probe's, judged into the rate and for when the next probe comes."""
    choice = ArChoice(largest=2, base=True)
    run(choice, {"base": 2.0, "plain": 5.0}, PROBE_EVERY - 1)
    assert choice.choose() == "base" and choice.probing is None and choice.again == "base"
    before = list(choice.recent["base"])
    choice.probed("base", 2, 40.0)  # its step, unjudged (the catch-up read the prompt): it sets nothing
    assert list(choice.recent["base"]) == before and choice.every == PROBE_EVERY
    assert choice.choose() == "base" and choice.probing == "base" and choice.again is None
    choice.learn("base", 2, 1.0)  # the judged step: chains still lose clearly
    assert choice.every == 2 * PROBE_EVERY and choice.next_probe == choice.steps + 2 * PROBE_EVERY
    assert choice.probing is None


def test_a_choice_ruled_out_is_never_chosen_and_the_last_one_stays():
    choice = ArChoice(largest=2, base=True)
    choice.rule_out("base")
    assert choice.options == ["plain"] and set(run(choice, {"plain": 5.0}, 40)) == {"plain"}
    choice.rule_out("plain")
    assert choice.options == ["plain"]
