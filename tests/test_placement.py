"""Device maps through accelerate (issue 21, item 2): parsing and checks without a model, and SmolLM2 split
across the CPU and disk offload giving a plain load's tokens for strict methods."""

from __future__ import annotations

import pytest
import torch
from conftest import spec_bench_rows

from core.methods import run_method
from core.models import encode_prompt, load_model
from core.placement import Placement, PlacementError, check_map, parse_device_map, parse_max_memory, placement_from_args


def test_policies_and_json_maps_parse():
    assert parse_device_map("auto") == "auto"
    assert parse_device_map(" sequential ") == "sequential"
    assert parse_device_map('{"model.embed_tokens": "cpu", "model.layers": "disk", "lm_head": "cpu"}') == {
        "model.embed_tokens": "cpu",
        "model.layers": "disk",
        "lm_head": "cpu",
    }


def test_a_map_file_is_read(tmp_path):
    f = tmp_path / "map.json"
    f.write_text('{"": "cpu"}')
    assert parse_device_map(str(f)) == {"": "cpu"}


@pytest.mark.parametrize(
    "text, says",
    [
        ("everywhere", "use auto, balanced"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "non-empty object"),
        ("{}", "non-empty object"),
        ('{"": "tpu"}', "not a device"),
        ('{"": true}', "not a device"),
    ],
)
def test_bad_device_maps_are_clear_errors(text, says):
    with pytest.raises(PlacementError, match=says):
        parse_device_map(text)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("text", ['{"": "cuda:1"}', '{"": 0}', '{"model.layers": "cuda"}'])
def test_a_map_naming_a_missing_gpu_says_what_the_machine_has(text):
    with pytest.raises(PlacementError, match="no CUDA device"):
        parse_device_map(text)


def test_max_memory_parses_sizes_per_device():
    assert parse_max_memory("cpu=2GiB") == {"cpu": 2 * 2**30}
    assert parse_max_memory('{"cpu": "500MB"}') == {"cpu": 500 * 10**6}


@pytest.mark.parametrize(
    "text, says",
    [
        ("cpu", "write device=size"),
        ("cpu=lots", "not a size"),
        ("cpu=0GiB", "must be positive"),
        ("disk=1GiB", "no disk budget"),
        ("gpu=1GiB", "not a device"),
    ],
)
def test_bad_max_memory_is_a_clear_error(text, says):
    with pytest.raises(PlacementError, match=says):
        parse_max_memory(text)


def test_disk_needs_an_offload_folder(tmp_path):
    with pytest.raises(PlacementError, match="--offload-folder"):
        placement_from_args('{"": "disk"}', None, None)
    assert placement_from_args(None, None, None) is None
    p = placement_from_args(None, "cpu=1GiB", str(tmp_path / "off"))
    assert p.device_map == "auto" and (tmp_path / "off").is_dir()


def test_a_planned_spill_to_disk_without_consent_is_refused():
    budget = Placement("auto", {"cpu": 100 * 2**20})
    with pytest.raises(PlacementError, match="does not fit in cpu=100MiB.*model.layers.9"):
        check_map({"model.layers.8": "cpu", "model.layers.9": "disk", "model.norm": "disk"}, budget)
    check_map({"model.layers.9": "disk"}, Placement("auto", {"cpu": 1}, "/tmp/x"))  # consented: no error


@pytest.mark.real_model
def test_a_budget_too_small_for_smollm2_fails_before_loading(smollm2):
    from core.models import PRESETS, is_fetched

    assert is_fetched("smollm2-135m") and "smollm2-135m" in PRESETS
    with pytest.raises(PlacementError, match="does not fit in cpu=100MiB"):
        load_model("smollm2-135m", dtype="float32", placement=Placement("auto", {"cpu": 100 * 2**20}), cache=False)


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm2_split_across_cpu_and_disk_gives_the_plain_loads_tokens(smollm2, tmp_path):
    """The first layers on the CPU, the rest offloaded to disk: strict methods give the plain load's tokens."""
    split = load_model(
        "smollm2-135m",
        dtype="float32",
        cache=False,
        placement=Placement("auto", {"cpu": 250 * 2**20}, str(tmp_path / "offload")),
    )
    where = set(split.model.hf_device_map.values())
    assert where == {"cpu", "disk"}, split.model.hf_device_map
    assert split.device == torch.device("cpu")
    row = spec_bench_rows(("summarization",), 1)[0]
    prompt = encode_prompt(smollm2.tokenizer, row["turns"][0])[-400:]
    for method, params in [("greedy", {}), ("pld", {}), ("aasd-strict", {}), ("recycle", {"cold": 1})]:
        plain = run_method(method, smollm2, prompt, {"max_new_tokens": 20, **params}).output_ids
        spread = run_method(method, split, prompt, {"max_new_tokens": 20, **params}).output_ids
        assert spread == plain, method


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_cli_refuses_a_missing_device_before_loading(capsys, monkeypatch):
    import core.models
    from workbench.commands.main import main

    monkeypatch.setattr(core.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    for flags in (["--device-map", '{"": "cuda:1"}'], ["--max-memory", "0=1GiB"], ["--max-memory", "cpu=nothing"]):
        assert main(["generate", "--method", "greedy", "--prompt", "hi", "--no-store", *flags]) == 2
        err = capsys.readouterr().err
        assert "error:" in err and "Traceback" not in err
