"""Device-to-host transfers per decoding step, counted on the tiny model.

On a GPU every scalar read (`.item()`, `int(t)`, `float(t)`, `bool(t)`: aten._local_scalar_dense) and every copy to
the CPU makes the host wait for the device, so a step's transfers are its syncs. Here the tensors live on the CPU,
where `.tolist()` and `.cpu()` do not reach the dispatcher: those are counted where they are called (each would be a
copy to the host from a device). The numpy fast paths of core.target_stats run only on CPU tensors and are not
counted (on a device their torch twins run instead).
"""

from __future__ import annotations

import traceback

import pytest
import torch
from conftest import make_tiny, perturbed
from torch.utils._python_dispatch import TorchDispatchMode

from core.methods import run_method

# A scalar read reaches the dispatcher as `item` under inference mode (the engine's) and as `_local_scalar_dense`
# outside it; `bool(t)` as `is_nonzero`, `torch.equal` as `equal`.
SCALAR_READS = (
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.item.default,
    torch.ops.aten.is_nonzero.default,
    torch.ops.aten.equal.default,
)


class HostTransfers(TorchDispatchMode):
    """Counts the host's reads of device data while active (see the module's docstring)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        super().__init__()
        self.count = 0
        self.where: list[str] = []
        for name in ("tolist", "cpu"):
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counting(original, name))

    def _counting(self, original, name):
        def counted(tensor, *args, **kwargs):
            self._hit(name)
            return original(tensor, *args, **kwargs)

        return counted

    def _hit(self, name: str) -> None:
        self.count += 1
        frame = next((f for f in reversed(traceback.extract_stack()[:-2]) if "/core/" in f.filename), None)
        self.where.append(f"{name} at {frame.filename.split('/core/')[-1]}:{frame.lineno}" if frame else name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SCALAR_READS:
            self._hit("scalar read")
        elif func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
            src = args[1] if func is torch.ops.aten.copy_.default else args[0]
            dst_device = args[0].device if func is torch.ops.aten.copy_.default else kwargs.get("device")
            if (
                isinstance(src, torch.Tensor)
                and src.device.type != "cpu"
                and dst_device is not None
                and torch.device(dst_device).type == "cpu"
            ):
                self._hit("copy to cpu")
        return func(*args, **kwargs)


def transfers_per_step(monkeypatch, method: str, params: dict, draft=None, prompt=None) -> list[tuple[int, list[str]]]:
    """The transfers between consecutive steps' ends (each counts one whole step: draft, forward, verify, emit)."""
    target = make_tiny()
    prompt = prompt or [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    counter = HostTransfers(monkeypatch)
    marks: list[tuple[int, int]] = []
    with counter:
        run = run_method(
            method,
            target,
            prompt,
            {"max_new_tokens": 24, **params},
            draft=draft,
            on_step=lambda trace: marks.append((counter.count, len(counter.where))),
        )
    assert len(run.steps) >= 3, "too few steps to count"
    return [(b[0] - a[0], counter.where[a[1] : b[1]]) for a, b in zip(marks, marks[1:])]


@pytest.mark.parametrize("method", ["greedy", "pld", "casd", "aasd", "recycle"])
def test_a_tree_step_at_t0_reads_the_device_once(monkeypatch, method):
    """One transfer per step: step_stats' one vector (and the drafter's top-k ids ride along with it)."""
    per_step = transfers_per_step(monkeypatch, method, {})
    assert max(n for n, _ in per_step) <= 1, per_step


def test_a_draft_model_step_at_t0_reads_the_device_twice(monkeypatch):
    """The draft chain's tokens and probabilities once at its end, the target's statistics once."""
    per_step = transfers_per_step(monkeypatch, "sd", {"gamma": 4}, draft=perturbed(0, 0.1))
    assert max(n for n, _ in per_step) <= 2, per_step


def test_the_counter_sees_scalar_reads_and_host_copies(monkeypatch):
    """The hook itself: a scalar read and a `.tolist()` each count once; arithmetic on the device none."""
    counter = HostTransfers(monkeypatch)
    x = torch.arange(4.0)
    with counter:
        y = (x * 2).sum()
        assert counter.count == 0
        float(y)
        assert counter.count == 1
        x.tolist()
        assert counter.count == 2
        with torch.inference_mode():
            int(x.argmax())
        assert counter.count == 3
