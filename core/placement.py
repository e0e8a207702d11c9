"""Where a model's layers live: accelerate device maps, memory budgets and disk offload.

`--device-map auto|balanced|balanced_low_0|sequential|<json>` and `--max-memory` are parsed and checked
here, before any weights load, so a map naming a device this machine lacks, or a budget that cannot hold
the model without disk offload the user did not ask for, is a clear error and not a failed load.
The engine needs nothing else: accelerate's hooks move activations between devices, and the KV-cache
adapter (core.cache) indexes each layer on its own device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.errors import WorkbenchError

POLICIES = ("auto", "balanced", "balanced_low_0", "sequential")


class PlacementError(WorkbenchError):
    pass


@dataclass(frozen=True)
class Placement:
    """How to spread one model: an accelerate policy name or an explicit {module: device} map, an optional
    per-device budget, and where disk-offloaded weights may go (None: disk offload is refused)."""

    device_map: str | dict = "auto"
    max_memory: dict = field(default_factory=dict)
    offload_folder: str | None = None

    def key(self) -> str:
        """Part of the loaded-model cache key: two placements of one model are two models."""
        return json.dumps([self.device_map, self.max_memory, self.offload_folder], sort_keys=True, default=str)

    def from_pretrained_kwargs(self) -> dict:
        kw: dict = {"device_map": self.device_map}
        if self.max_memory:
            kw["max_memory"] = self.max_memory
        if self.offload_folder:
            kw["offload_folder"] = self.offload_folder
        return kw


def _device_name(value, what: str) -> str | int:
    """A device as accelerate spells it (int GPU index, 'cpu', 'disk', 'mps', 'cuda:N' -> N), checked to exist."""
    if isinstance(value, bool):
        raise PlacementError(f"{what}: {value!r} is not a device")
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        index = int(value)
    elif isinstance(value, str) and value.startswith("cuda"):
        rest = value[4:]
        index = 0 if rest == "" else int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else -1
        if index < 0:
            raise PlacementError(f"{what}: {value!r} is not a device; use cpu, disk, mps, cuda:N or a GPU index N")
    elif value in ("cpu", "disk"):
        return value
    elif value == "mps":
        if not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
            raise PlacementError(
                f"{what} names mps, which this machine does not have: use cpu (or disk with --offload-folder)"
            )
        return value
    else:
        raise PlacementError(f"{what}: {value!r} is not a device; use cpu, disk, mps, cuda:N or a GPU index N")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index >= count:
        have = f"only {count} CUDA device(s) (0..{count - 1})" if count else "no CUDA device"
        raise PlacementError(f"{what} names GPU {index}, but this machine has {have}: use cpu, or a device it has")
    return index


def parse_device_map(text: str) -> str | dict:
    """A policy name, a JSON object {module name: device}, or a file holding that object."""
    text = (text or "").strip()
    if text in POLICIES:
        return text
    source = text
    if not text.startswith(("{", "[")):
        path = Path(text).expanduser()
        if not path.is_file():
            raise PlacementError(
                f"--device-map {text!r}: use {', '.join(POLICIES)}, a JSON object such as "
                '\'{"model.embed_tokens": "cpu", "model.layers": "disk", ...}\', or a file holding one'
            )
        from core.files import MiB, read_text

        try:
            source = read_text(path, what="--device-map", max_bytes=MiB)
        except WorkbenchError as e:
            raise PlacementError(str(e)) from None
    try:
        mapping = json.loads(source)
    except json.JSONDecodeError as e:
        raise PlacementError(f"--device-map is not valid JSON ({e.msg} at column {e.colno})") from None
    except (RecursionError, ValueError):  # nested past the recursion limit; an integer of over 4,300 digits
        raise PlacementError("--device-map is JSON nested too deeply or with numbers too long to read") from None
    if not isinstance(mapping, dict) or not mapping:
        raise PlacementError("--device-map JSON must be a non-empty object {module name: device}")
    return {str(k): _device_name(v, f"--device-map entry {k!r}") for k, v in mapping.items()}


def parse_max_memory(text: str) -> dict:
    """'cpu=2GiB,0=10GiB' or a JSON object: the most each device may hold (accelerate's sizes)."""
    from accelerate.utils import convert_file_size_to_int

    text = (text or "").strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            pairs = json.loads(text)
        except json.JSONDecodeError as e:
            raise PlacementError(f"--max-memory is not valid JSON ({e.msg})") from None
        if not isinstance(pairs, dict):
            raise PlacementError("--max-memory JSON must be an object {device: size}")
        items = list(pairs.items())
    else:
        items = []
        for part in text.split(","):
            device, sep, size = part.partition("=")
            if not sep or not device.strip() or not size.strip():
                raise PlacementError(f"--max-memory {part!r}: write device=size, e.g. cpu=2GiB,0=10GiB")
            items.append((device.strip(), size.strip()))
    budget = {}
    for device, size in items:
        name = _device_name(device, f"--max-memory {device!r}")
        if name == "disk":
            raise PlacementError("--max-memory takes no disk budget: pass --offload-folder DIR to allow disk offload")
        try:
            n = convert_file_size_to_int(size)
        except (ValueError, TypeError):
            raise PlacementError(f"--max-memory {device}={size!r}: not a size; write e.g. 500MB, 2GiB") from None
        if n <= 0:
            raise PlacementError(f"--max-memory {device}={size}: the size must be positive")
        budget[name] = n
    return budget


def placement_from_args(device_map: str | None, max_memory: str | None, offload_folder: str | None) -> Placement | None:
    """The Placement the command-line flags ask for, or None for a plain load on one device."""
    if not device_map and not max_memory and not offload_folder:
        return None
    mapping = parse_device_map(device_map) if device_map else "auto"
    if isinstance(mapping, dict) and "disk" in mapping.values() and not offload_folder:
        raise PlacementError("--device-map puts modules on disk: pass --offload-folder DIR for their weights")
    folder = None
    if offload_folder:
        path = Path(offload_folder).expanduser()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PlacementError(f"--offload-folder {offload_folder}: cannot create it ({e.strerror})") from None
        folder = str(path)
    return Placement(mapping, parse_max_memory(max_memory) if max_memory else {}, folder)


def check_fits(config, placement: Placement, dtype: torch.dtype) -> None:
    """For a policy map with a budget: refuse, before loading weights, a budget that would push layers to
    disk when the user allowed no disk offload (accelerate would otherwise offload silently)."""
    if not isinstance(placement.device_map, str) or not placement.max_memory or placement.offload_folder:
        return
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        empty = AutoModelForCausalLM.from_config(config, dtype=dtype)
    empty.tie_weights()  # tied embeddings count once, as the real load places them
    budget = dict(placement.max_memory)
    planned = infer_auto_device_map(
        empty, max_memory=budget, dtype=dtype, no_split_module_classes=getattr(empty, "_no_split_modules", None) or []
    )
    check_map(planned, placement)


def check_map(device_map: dict, placement: Placement) -> None:
    spilled = [name for name, device in device_map.items() if device == "disk"]
    if spilled and not placement.offload_folder:
        budget = ", ".join(f"{k}={v / 2**20:.0f}MiB" for k, v in placement.max_memory.items()) or "the devices' memory"
        what = "the whole model" if spilled == [""] else f"{len(spilled)} module(s) ({spilled[0]}, ...)"
        raise PlacementError(
            f"the model does not fit in {budget}: {what} would be offloaded to disk. "
            "Raise --max-memory, or pass --offload-folder DIR to allow disk offload (slow)"
        )


def input_device(model) -> torch.device:
    """Where the token ids go: the input embedding's device (the CPU when it is offloaded)."""
    device = model.get_input_embeddings().weight.device
    return torch.device("cpu") if device.type == "meta" else device
