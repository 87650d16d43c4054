"""Parsing of the environment: booleans, lists, placeholders; each mistake a ConfigError naming the variable."""

from __future__ import annotations

import ast
import copy
import pickle
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lazyops import ConfigError
from lazyops._settings import VARIABLES, Settings, parse_bool, parse_chain, settings_from_environment, unknown_variables

TRUE_WORDS = ["1", "true", "yes", "on"]
FALSE_WORDS = ["0", "false", "no", "off", ""]


def any_case(words):
    return st.sampled_from(words).flatmap(
        lambda word: st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
            lambda upper: "".join(c.upper() if u else c for c, u in zip(word, upper, strict=True))
        )
    )


@given(any_case(TRUE_WORDS))
def test_true_words_in_any_case(text):
    assert parse_bool("LAZYOPS_STRICT", text) is True


@given(any_case(FALSE_WORDS))
def test_false_words_in_any_case(text):
    assert parse_bool("LAZYOPS_STRICT", text) is False


@given(st.text().filter(lambda t: t.strip().lower() not in TRUE_WORDS + FALSE_WORDS))
def test_anything_else_is_refused_naming_variable_and_value(text):
    with pytest.raises(ConfigError) as caught:
        parse_bool("LAZYOPS_VERBOSE", text)
    assert str(caught.value).startswith(f"LAZYOPS_VERBOSE={text!r} is not a boolean")


@given(st.lists(st.sampled_from(["torch", "triton", "tilelang", "ext"]), min_size=1, unique=True))
def test_chain_round_trips_with_spaces(names):
    assert parse_chain("LAZYOPS_BACKEND", " , ".join(names)) == tuple(names)


def test_trace_placeholders(tmp_path):
    settings = settings_from_environment({"LAZYOPS_TRACE": str(tmp_path / "t-{rank}.jsonl"), "LOCAL_RANK": "2"})
    assert settings.trace == str(tmp_path / "t-2.jsonl")
    with pytest.raises(ConfigError, match="placeholder other than"):
        settings_from_environment({"LAZYOPS_TRACE": str(tmp_path / "t-{host}.jsonl")})


@pytest.mark.parametrize("variable", ["RANK", "LOCAL_RANK"])
def test_bad_rank_is_named_whether_or_not_the_trace_path_uses_it(variable):
    with pytest.raises(ConfigError, match=f"{variable}='zero' is not an integer rank"):
        settings_from_environment({variable: "zero"})


def test_settings_are_immutable():
    settings = settings_from_environment({})
    with pytest.raises(AttributeError, match="cannot assign"):
        settings.strict = True


def test_settings_behave_as_a_frozen_dataclass():
    settings = Settings(chain=("triton",), fallback=frozenset({"rope_tl"}))
    same_value = Settings(chain=("triton",), fallback=frozenset({"rope_tl"}), origin={"backend": "elsewhere"})
    assert settings == same_value and hash(settings) == hash(same_value)  # origin is not part of the value
    assert settings != settings.replace(strict=True)
    assert repr(settings) == (
        "Settings(chain=('triton',), fallback=frozenset({'rope_tl'}), strict=False, verbose=False, trace=None, "
        "trace_args=False, rank=0, plan=None, plan_strict=False)"
    )
    with pytest.raises(AttributeError):
        settings.strict = True  # type: ignore[misc]
    changed = settings.replace(strict=True, origin={"strict": "configure(strict=...)"})
    assert changed.strict and changed.origin["strict"] == "configure(strict=...)"
    assert changed.origin["backend"] == "LAZYOPS_BACKEND"
    with pytest.raises(TypeError):
        settings.replace(colour="blue")
    for clone in (pickle.loads(pickle.dumps(changed)), copy.copy(changed), copy.deepcopy(changed)):
        assert clone == changed and dict(clone.origin) == dict(changed.origin)


def test_unknown_variables_are_named_with_the_nearest_known_one():
    environ = {
        "LAZYOPS_BAKEND": "triton",
        "lazyops_strict": "1",  # names are case-sensitive: this one is ignored too
        "LAZYOPS_CACHE_DIR": "~/cache",  # an older lazyops' variable: nothing near it now
        "LAZYOPS_BACKEND": "torch",
        "PATH": "/bin",
        "EAGER_IMPORT": "0",
    }
    assert unknown_variables(environ) == [
        ("LAZYOPS_BAKEND", "LAZYOPS_BACKEND"),
        ("LAZYOPS_CACHE_DIR", None),
        ("lazyops_strict", "LAZYOPS_STRICT"),
    ]
    assert unknown_variables({name: "" for name in VARIABLES}) == []


def test_every_variable_lazyops_reads_is_in_the_one_table():
    """The names written in lazyops' core modules (the command line keeps its own) are the table's, so a new
    variable cannot be read without being known to the misspelling check."""
    src = Path(__file__).resolve().parents[2] / "src" / "lazyops"
    written = {
        node.value
        for path in src.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"LAZYOPS_[A-Z_]*[A-Z]", node.value)
    }
    assert written and written <= set(VARIABLES)
    variables = {name for name in VARIABLES if name.startswith("LAZYOPS_")}
    assert variables <= written, "a variable in the table that no module reads"
