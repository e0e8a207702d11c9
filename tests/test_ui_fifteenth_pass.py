"""Issue 33, the fifteenth newcomer pass: the pure functions behind its defects (the page behaviour is in
tests/test_browser_fifteenth_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import InvalidInputError
from workbench import service

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "names, twice",
    [
        (["greedy", "aasd[auto]", "csd", "greedy"], "'greedy' is chosen twice: "),
        (
            ["aasd[alpha=0.1,beta=0.3]", "aasd[beta=0.3, alpha=0.1]"],
            "'aasd[beta=0.3, alpha=0.1]' is chosen twice (as 'aasd[alpha=0.1,beta=0.3]' before it)",
        ),
    ],
)
def test_a_method_chosen_twice_is_refused_before_anything_runs(names, twice):
    """Defect 1: greedy typed a second time ran a fourth column, two "1.00×" greedy rows of different speeds, and
    nothing said which one the speed-ups were measured against."""
    with pytest.raises(InvalidInputError, match=re.escape(twice) + r".*a comparison runs each method once.*Repeats"):
        service.check_methods(names, "smollm2-135m", None)


def test_variants_of_one_method_are_not_duplicates():
    specs = service.check_methods(["aasd", "aasd[alpha=0.2]", "aasd[auto]"], "smollm2-135m", None)
    assert [name for name, _ in specs] == ["aasd"] * 3


def test_a_method_with_no_finished_run_shows_a_dash_for_its_mal():
    """Defect 4: after a Stop, the stopped method's row read "aasd[auto] | 0 | – | " with its MAL cell blank."""
    from workbench.ui.compare_tab import Speeds, speed_frame

    speeds = Speeds(["greedy", "aasd[auto]"])
    speeds.tps[0], speeds.speedups[0], speeds.mals[0] = [4.7], [1.0], [1.0]
    frame = speed_frame(speeds.summary())
    assert frame.to_dict("records") == [
        {"method": "greedy", "runs": 1, "tok/s": "4.7", "speed-up": "1.00×", "MAL": "1.00"},
        {"method": "aasd[auto]", "runs": 0, "tok/s": "–", "speed-up": "–", "MAL": "–"},
    ]


def test_an_unknown_parameter_lists_the_methods_own_parameters():
    """Defect 5: `aasd[nonsense=1]` listed every method's parameters (num_beams, lam, gamma…), as if AASD took them."""
    from core.methods import get_method
    from core.methods.spec import parse_method_spec, resolve_params

    name, params = parse_method_spec("aasd[nonsense=1]")
    with pytest.raises(InvalidInputError) as err:
        resolve_params(name, params)
    message = str(err.value)
    assert message.startswith("unknown parameter 'nonsense'; aasd takes: "), message
    taken = message.split("takes: ", 1)[1].split(", ")
    assert set(taken) == set(get_method("aasd").params)
    assert not {"num_beams", "lam", "gamma", "memory_mode"} & set(taken), taken


def test_a_word_that_stands_for_a_number_is_said_so_in_the_range_message():
    """Defect 6: `aasd[max_nodes=-3]` read "out of range [0, 256] (or one of auto = 0)", a second range in brackets."""
    from core.methods.spec import resolve_params

    with pytest.raises(InvalidInputError) as err:
        resolve_params("aasd", {"max_nodes": "-3"})
    assert str(err.value).startswith("max_nodes = -3 is out of range [0, 256]; auto stands for 0: "), str(err.value)


def test_the_terminal_table_runs_in_float32_as_the_workbench_does():
    """Defect 2: `bash run.sh table` ran in bfloat16 (bench's --dtype auto), where PLD, a lossless method, left greedy's
    text at a near-tie (equal_to_greedy 0.610, score 21.2 against 32.3) with no word on the precision nearby."""
    lines = (ROOT / "run.sh").read_text().split("\n")
    table = lines[lines.index("  table)") + 1 : lines.index("  table)") + 5]
    bench = [line for line in table if "workbench bench" in line]
    assert len(bench) == 1 and "--dtype float32" in bench[0], table
