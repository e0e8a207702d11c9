"""The one grammar for `NAME[key=value,...]` (core.spec), as methods and compressors read it: any text is a
parse or an InvalidInputError of one line, never another exception (OverflowError, ValueError, a traceback)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.compress import check_compressor, parse_compressor
from core.errors import InvalidInputError
from core.methods import METHODS, parse_method_spec, resolve_params, split_method_list
from core.params import PARAMS
from core.spec import parse_spec, split_specs, to_number

CASES = settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
SEED_400 = "7" * 400


def refused(call, *args, match: str | None = None) -> str:
    with pytest.raises(InvalidInputError, match=match) as e:
        call(*args)
    message = str(e.value)
    assert message and "\n" not in message and len(message) < 600, message  # one line, and not the whole input back
    return message


# ---- the grammar, by example ----------------------------------------------------------------


def test_a_spec_is_a_name_and_its_items():
    assert parse_spec("aasd", "method") == parse_spec(" aasd ", "method")
    spec = parse_spec(" aasd [ alpha = 0.2 , align_graft=1,, ] ", "method")
    assert (spec.name, spec.items, spec.flags) == ("aasd", {"alpha": "0.2", "align_graft": "1"}, ())
    assert parse_spec("aasd[auto]", "method", flags=("auto",)).flags == ("auto",)
    assert split_specs("greedy, aasd[alpha=0.2,beta=0.1] ,,pld") == ["greedy", "aasd[alpha=0.2,beta=0.1]", "pld"]


@pytest.mark.parametrize(
    "text,match",
    [
        ("aasd[alpha=0.1", "not closed"),
        ("aasd]", r"'\]'"),
        ("aasd[[alpha=1]]", "nest"),
        ("aasd[alpha=1]x", "after"),
        ("aasd[alpha=1][beta=2]", "nest|after"),
        ("[alpha=1]", "name is empty"),
        ("", "name is empty"),
        ("aasd[=1]", "no key"),
        ("aasd[ =1]", "no key"),
        ("aasd[alpha=0.1,alpha=0.2]", "twice"),
        ("aasd[auto,auto]", "twice"),
        ("aasd[alpha]", "bad option 'alpha', not key=value or auto"),
        ("aasd[al pha=1]", "not a name"),
        ("aasd[ålpha=1]", "not a name"),
    ],
)
def test_malformed_specs_are_one_line_errors(text, match):
    refused(parse_spec, text, "method", ("auto",), match=match)


@pytest.mark.parametrize("text", ["greedy,aasd[alpha=1", "greedy]", "aasd[[x=1]],pld", "a[b[c]]"])
def test_a_list_whose_brackets_do_not_balance_is_refused(text):
    refused(split_specs, text, match="brackets|not closed")


# ---- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,match",
    [
        ("aasd[max_nodes=99999999999999999999999]", "max_nodes = 99999999999999999999999 is out of range"),
        (
            f"sd[seed={SEED_400}]",
            "seed = 7777.*….* is out of range",
        ),  # the message shows the start of it, not 400 digits
        ("sd[seed=9223372036854775808]", "out of range"),  # 2**63
        ("aasd[alpha=nan]", "finite"),
        ("aasd[alpha=inf]", "finite"),
        ("aasd[alpha=-inf]", "finite"),
        ("aasd[alpha=1e999]", "finite"),
        ("aasd[alpha=-1e-9]", "out of range"),
        ("aasd[max_nodes=١٢]", "digits 0-9"),
        ("aasd[max_nodes=１２]", "digits 0-9"),
        ("aasd[alpha=٠.٥]", "digits 0-9"),
        ("aasd[max_nodes=1_0]", "integer"),
        ("aasd[max_nodes=0x10]", "integer"),
        ("aasd[max_nodes=6.0]", "integer"),
        ("aasd[alpha=0.1.2]", "number"),
        ("casd[delta=0]", r"delta = 0 is out of range \(0"),
        ("aasd[alpha=]", "must be a number"),
    ],
)
def test_numbers_outside_what_a_parameter_takes_are_refused(spec, match):
    name, overrides = parse_method_spec(spec)
    refused(resolve_params, name, overrides, match=match)


def test_bounds_are_inclusive_and_words_map_to_numbers():
    assert resolve_params("sd", {"seed": str(2**63 - 1)})["seed"] == 2**63 - 1  # exact: no round trip through float
    assert resolve_params("aasd", {"max_nodes": "auto", "alpha": "+0.5", "key_len": " 7 "})["max_nodes"] == 0
    assert resolve_params("csd", {"memory_mode": "Frozen", "lam": True})["memory_mode"] == 1
    for bad in (10**5000, float("nan"), 1.5, "1.5", [], {}, b"1"):  # values from the UI or a stored run, not text
        refused(resolve_params, "sd", {"seed": bad})
    assert to_number(3.0, int, "k", 0, 5) == 3 and isinstance(to_number(3, float, "x", 0, 5), float)


@pytest.mark.parametrize(
    "spec,match",
    [
        ("selfinfo[layers=99999999999999999999999]", "out of range"),
        ("selfinfo[layers=0]", "out of range"),
        ("selfinfo[layers=٣]", "digits 0-9"),
        ("selfinfo[layers=1,layers=2]", "twice"),
        ("selfinfo[layers=2", "not closed"),
        ("selfinfo[=2]", "no key"),
        ("selfinfo[unit=paragraph]", "unit must be one of"),
        ("llmlingua[layers=2]", "takes: none"),
        ("selfinfo[auto]", "bad option 'auto', not key=value;"),
        (123, "must be text"),
        ("selfinfo[layers=]", "whole number"),
    ],
)
def test_compressor_specs_share_the_grammar_and_its_errors(spec, match):
    refused(check_compressor, spec, match=match)


def test_compressor_labels_are_canonical():
    assert check_compressor(" SelfInfo [ unit = sentence , layers = 08 ] ") == "selfinfo[layers=8,unit=sentence]"
    assert check_compressor("selfinfo[unit=word]") == "selfinfo" and check_compressor(None) == "selfinfo"


# ---- any text: a parse or InvalidInputError, nothing else ------------------------------------

NAMES = sorted(METHODS) + ["nope", "", " ", "AASD", "aasd ", "a]b", "a=b", "a,b"]
KEYS = sorted(PARAMS) + ["", " ", "bogus", "pool", "fitted", "auto", "1x", "a-b", "é", "seed", "max_nodes", "alpha"]
TRICKY = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e999",
    "-1e999",
    "1e-400",
    SEED_400,
    "9" * 5000,
    "٣",
    "１２",
    "٠.٥",
    "1_000",
    "0x10",
    "",
    " ",
    "auto",
    "frozen",
    "online",
    "yes",
    "no",
    "full",
    "compressed",
    "1.0",
    "-0",
    "+5",
    " 7 ",
    "0.",
    ".5",
    "5e",
    "--1",
    str(2**63 - 1),
    str(2**63),
    "1e18",
    "=",
    "[",
    "]",
    ",",
]
values = st.one_of(
    st.sampled_from(TRICKY),
    st.integers(-(2**90), 2**90).map(str),
    st.floats().map(repr),
    st.text(max_size=8),
    st.integers(0, 10**300).map(str),
)
items = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), values), st.sampled_from(KEYS), st.text(max_size=6)
)
opens, closes = (
    st.sampled_from(["[", "[", "[", "", "[[", "]", " ["]),
    st.sampled_from(["]", "]", "]", "", "]]", "][", "] x", "[]"]),
)
method_texts = st.one_of(
    st.builds(
        lambda n, i, a, b: f"{n}{a}{','.join(i)}{b}", st.sampled_from(NAMES), st.lists(items, max_size=4), opens, closes
    ),
    st.text(max_size=30),
    st.text(alphabet="aasdgrey[]=,0123456789.e-+_ ٣", max_size=30),
)


def check_params(params: dict, given: dict) -> None:
    """What a resolved parameter set must be: each given value of its parameter's kind and range (a method's
    defaults may lie outside, as top_k = 0 for 'no top-k'), and the whole set valid JSON."""
    for k in given:
        spec, v = PARAMS.get(k), params.get(k)
        if spec is None or given[k] is None:  # None: not given (the default stays)
            continue
        assert isinstance(v, spec.kind) and not isinstance(v, bool), (k, v)
        assert math.isfinite(v) and (spec.low < v if spec.low_open else spec.low <= v) and v <= spec.high, (k, v)
    json.dumps(params, allow_nan=False)  # what the store and --json write


@CASES
@given(text=method_texts, as_list=st.booleans())
@example(text=f"sd[seed={SEED_400}]", as_list=False)
@example(text="aasd[max_nodes=99999999999999999999999]", as_list=False)
@example(text="aasd[alpha=nan,beta=inf]", as_list=True)
@example(text="aasd[max_nodes=١٢]", as_list=False)
@example(text="aasd[alpha=0.1,alpha=0.2],greedy", as_list=True)
@example(text="aasd[=1", as_list=True)
def test_any_method_text_is_a_method_or_an_invalid_input_error(text, as_list):
    """What `generate --method`, `bench --methods` and the UI do with a method text before loading a model."""
    try:
        for spec in split_method_list(text) if as_list else [text]:
            name, overrides = parse_method_spec(spec)
            check_params(resolve_params(name, overrides), overrides)
    except InvalidInputError as e:
        assert str(e) and "\n" not in str(e)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**200), 2**200),
    st.floats(),
    st.sampled_from(TRICKY),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
)


@CASES
@given(name=st.sampled_from(sorted(METHODS)), values=st.dictionaries(st.sampled_from(KEYS), scalars, max_size=4))
def test_any_parameter_values_resolve_or_are_an_invalid_input_error(name, values):
    """Values from the UI, a stored run or a JSON file are numbers, not text: the same rule holds."""
    try:
        check_params(resolve_params(name, values), values)
    except InvalidInputError as e:
        assert str(e) and "\n" not in str(e)


compressor_texts = st.one_of(
    st.builds(
        lambda n, i, a, b: f"{n}{a}{','.join(i)}{b}",
        st.sampled_from(["selfinfo", "SelfInfo", "llmlingua", "llmlingua2", "nope", "", " "]),
        st.lists(
            st.one_of(
                st.builds(
                    lambda k, v: f"{k}={v}",
                    st.sampled_from(["layers", "unit", "", "bogus", "LAYERS"]),
                    st.one_of(values, st.sampled_from(["word", "sentence", "Sentence"])),
                ),
                st.text(max_size=6),
            ),
            max_size=3,
        ),
        opens,
        closes,
    ),
    st.text(max_size=30),
    st.none(),
    st.integers(),
    st.floats(),
)


@CASES
@given(text=compressor_texts)
@example(text="selfinfo[layers=99999999999999999999999]")
@example(text=f"selfinfo[layers={SEED_400}]")
def test_any_compressor_text_is_a_compressor_or_an_invalid_input_error(text):
    try:
        label = check_compressor(text)
    except InvalidInputError as e:
        assert str(e) and "\n" not in str(e)
        return
    name, options = parse_compressor(label)
    assert check_compressor(label) == label  # canonical: reading the label gives the label
    assert all(isinstance(v, int) and 1 <= v or v == "sentence" for v in options.values())
