"""The choice ``lazyops tune`` writes into a plan, a pure function of the figures measured (synthetic tables here):
the fastest by total time, ties within the noise to the default, and a switch by token count only for 5 % or more on
each side of it."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_support import candidate

from lazyops._plan import Switch
from lazyops.cli.tune import NEAR_TIE, SWITCH_GAIN, choose, clearly_faster, fastest, tie

TOKENS = (1, 16, 128, 1024)


def test_the_fastest_total_wins():
    figures = {"torch": candidate({1: 5, 1024: 100}), "triton": candidate({1: 5.1, 1024: 80})}
    assert choose(figures, default="torch") == ("triton", None)


def test_a_near_tie_goes_to_the_default():
    # triton is 1.5 % faster in total: less than NEAR_TIE, so not worth moving the kernel away from the default
    figures = {"tilelang": candidate({1: 10, 1024: 100}, 0.0), "triton": candidate({1: 10, 1024: 98.4}, 0.0)}
    assert choose(figures, default="tilelang") == ("tilelang", None)
    assert choose(figures, default=None) == ("triton", None)
    assert choose(figures, default="torch") == ("triton", None)  # a default that is not a candidate decides nothing


def test_a_gain_within_the_measured_spread_is_a_tie():
    quiet = {"tilelang": candidate({1: 10, 1024: 100}, 0.01), "triton": candidate({1: 10, 1024: 94}, 0.01)}
    assert choose(quiet, default="tilelang") == ("triton", None)
    noisy = {"tilelang": candidate({1: 10, 1024: 100}, 0.08), "triton": candidate({1: 10, 1024: 94}, 0.08)}
    assert choose(noisy, default="tilelang") == ("tilelang", None)


def test_a_switch_needs_five_percent_on_each_side():
    # tilelang wins below 128 tokens, triton from 128 on, each by 10 %: a switch at 128
    figures = {
        "tilelang": candidate({1: 9, 16: 9, 128: 55, 1024: 440}),
        "triton": candidate({1: 10, 16: 10, 128: 50, 1024: 400}),
    }
    assert choose(figures, default="triton") == ("triton", Switch(128, "tilelang"))
    # 4 % below: not enough for a comparison in every call
    figures["tilelang"] = candidate({1: 9.6, 16: 9.6, 128: 55, 1024: 440})
    assert choose(figures, default="triton") == ("triton", None)


def test_a_switch_needs_every_count_on_its_side():
    # tilelang is 10 % faster at 1 token, triton 10 % faster from 16 on: a switch at 16
    figures = {
        "tilelang": candidate({1: 9, 16: 11, 128: 55, 1024: 440}),
        "triton": candidate({1: 10, 16: 10, 128: 50, 1024: 400}),
    }
    assert choose(figures, default="triton") == ("triton", Switch(16, "tilelang"))
    # ... but not if triton is only 2 % faster at 16, or tilelang faster again at 128: no one threshold then
    figures["tilelang"] = candidate({1: 9, 16: 10.2, 128: 55, 1024: 440})
    assert choose(figures, default="triton") == ("triton", None)
    figures["tilelang"] = candidate({1: 9, 16: 11, 128: 45, 1024: 440})
    assert choose(figures, default="triton") == ("triton", None)


def test_a_switch_is_no_more_than_the_spread_allows():
    figures = {
        "tilelang": candidate({1: 9, 128: 55}, spread=0.15),
        "triton": candidate({1: 10, 128: 50}, spread=0.15),
    }
    assert choose(figures, default="triton") == ("triton", None)


def test_a_wrong_or_untimed_backend_cannot_be_chosen_because_it_is_not_a_candidate():
    """``tune`` passes only the candidates that passed their check; the default among the rest still decides ties."""
    figures = {"torch": candidate({1: 10}), "fast": candidate({1: 10.1})}
    assert choose(figures, default="wrong") == ("torch", None)


# -- the rule, as properties of any table -------------------------------------------------------------------------

BACKENDS = ("torch", "triton", "tilelang", "port")


@st.composite
def tables(draw):
    """A table of 1 to 4 candidates timed at 1 to 4 token counts (µs 1 to 1000, spreads 0 to 30 %), and a default
    (a candidate, or a backend that is not one, or none)."""
    tokens = sorted(draw(st.sets(st.sampled_from(TOKENS), min_size=1)))
    names = draw(st.lists(st.sampled_from(BACKENDS), min_size=1, max_size=4, unique=True))
    times = st.floats(1, 1000, allow_nan=False, allow_infinity=False)
    figures = {
        name: candidate({m: draw(times) for m in tokens}, spread=draw(st.sampled_from([0.0, 0.01, 0.1, 0.3])))
        for name in names
    }
    default = draw(st.sampled_from([*names, "elsewhere", None]))
    return figures, default, tokens


pinned = settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def total(figures, tokens) -> float:
    return sum(figures.us[m] for m in tokens)


@pinned
@given(tables())
def test_the_choice_follows_the_rule(table):
    figures, default, tokens = table
    choice, switch = choose(figures, default)
    assert choice in figures
    quickest = min(total(f, tokens) for f in figures.values())
    if switch is None:
        # the chosen one is the fastest, or the default tied with the fastest
        assert total(figures[choice], tokens) == quickest or (
            choice == default and tie(figures[choice], min(figures.values(), key=lambda f: total(f, tokens)), tokens)
        )
        return
    assert switch.backend in figures and switch.backend != choice
    assert switch.below in tokens and switch.below > tokens[0]
    small, large = figures[switch.backend], figures[choice]
    below = [m for m in tokens if m < switch.below]
    above = [m for m in tokens if m >= switch.below]
    # at least 5 % (and more than the spread) on each side, at every token count
    assert all(large.us[m] >= small.us[m] * (1 + SWITCH_GAIN) for m in below)
    assert all(small.us[m] >= large.us[m] * (1 + SWITCH_GAIN) for m in above)
    assert all(clearly_faster(small, large, m) for m in below) and all(clearly_faster(large, small, m) for m in above)
    # and the switch beats each of its two backends alone
    combined = sum(small.us[m] for m in below) + sum(large.us[m] for m in above)
    assert combined < total(small, tokens) and combined < total(large, tokens)


@pinned
@given(tables())
def test_the_choice_does_not_depend_on_the_order_of_the_candidates(table):
    figures, default, _ = table
    assert choose(dict(reversed(list(figures.items()))), default) == choose(figures, default)


@pinned
@given(tables(), st.floats(0.5, 4))
def test_the_choice_does_not_depend_on_the_unit(table, scale):
    """Times in µs or in ms, or on a machine uniformly faster: the same choice."""
    figures, default, tokens = table
    scaled = {
        name: candidate({m: us * scale for m, us in f.us.items()}, spread=next(iter(f.spread.values())))
        for name, f in figures.items()
    }
    ranked = sorted(total(f, tokens) for f in figures.values())
    if any(abs(a - b) <= 1e-6 * b for a, b in itertools.pairwise(ranked)):
        return  # near-exact ties may round either way once scaled
    if any(_at_a_threshold(f, g, tokens) for f in figures.values() for g in figures.values() if f is not g):
        return  # a ratio on a threshold (5 %, the spread, the tie) may round either way once scaled
    assert choose(scaled, default) == choose(figures, default)


def _at_a_threshold(a, b, tokens) -> bool:
    thresholds = [1 + SWITCH_GAIN, 1 + NEAR_TIE, *(1 + s for s in a.spread.values())]
    ratios = [b.us[m] / a.us[m] for m in tokens] + [total(b, tokens) / total(a, tokens)]
    return any(abs(ratio - threshold) < 1e-9 for ratio in ratios for threshold in thresholds)


@pinned
@given(tables())
def test_a_backend_clearly_fastest_everywhere_is_chosen_alone(table):
    """A backend faster than every other by more than 5 % and its spread at every token count is chosen, with no
    switch, whatever the default: a plan never keeps a kernel on a backend that is clearly slower."""
    figures, default, tokens = table
    for name, mine in figures.items():
        others = [f for other, f in figures.items() if other != name]
        if others and all(clearly_faster(mine, f, m) and not tie(mine, f, tokens) for f in others for m in tokens):
            assert choose(figures, default) == (name, None)
            assert fastest(figures, tokens, default) == name
