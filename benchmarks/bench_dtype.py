"""Is bfloat16 worth it on this CPU? Matmul throughput and one SmolLM2 decoding step in fp32 vs bf16.

CPUs without bf16 units (AVX512-BF16 / AMX) emulate bf16 matmuls, which can be far slower than fp32;
`--dtype auto` picks fp32 there. This prints the numbers behind that choice, and, for the workbench's own default
(float32, service.WORKBENCH_DTYPE), the demo's methods on the default sample in each dtype: how long each took and
the token where its text left greedy's.

    python benchmarks/bench_dtype.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import cache as kv  # noqa: E402
from core.models import _cpu_has_bf16, load_model, resolve_dtype  # noqa: E402


def gflops(dtype: torch.dtype, n: int = 512, seconds: float = 2.0) -> float:
    a = torch.randn(n, n).to(dtype)
    a @ a
    t0, count = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        a @ a
        count += 1
    return count * 2 * n**3 / (time.perf_counter() - t0) / 1e9


@torch.inference_mode()
def step_ms(dtype: str, cache_len: int = 800, repeats: int = 5) -> float:
    m = load_model("smollm2-135m", device="cpu", dtype=dtype).model
    out = m(torch.full((1, cache_len), 7), use_cache=True)
    cache = out.past_key_values
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        m(torch.tensor([[5]]), position_ids=torch.tensor([[cache_len]]), past_key_values=cache, use_cache=True)
        times.append((time.perf_counter() - t0) * 1e3)
        kv.crop(cache, cache_len)
    return sorted(times)[len(times) // 2]


@torch.inference_mode()
def head_ms(dtype: torch.dtype, vocab: int, hidden: int, rows: int = 2, repeats: int = 5) -> tuple[float, float]:
    """The output head on the last position only, as `logits_to_keep=1` gives it: a (1, 1, H) view of a
    (1, T, H) tensor, then the same row packed densely (what core.models.pack_output_head_input does)."""
    weight = torch.randn(vocab, hidden).to(dtype)
    view = torch.randn(1, rows, hidden).to(dtype)[:, -1:, :]
    packed = view.clone(memory_format=torch.contiguous_format)

    def median(x):
        torch.nn.functional.linear(x, weight)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.nn.functional.linear(x, weight)
            times.append((time.perf_counter() - t0) * 1e3)
        return sorted(times)[len(times) // 2]

    return median(view), median(packed)


def demo_sample(methods=("greedy", "aasd-strict", "aasd[auto]", "csd"), tokens: int = 128, rounds: int = 2) -> None:
    """The default sample, as the Compare tab runs it, per dtype; dtypes interleaved per round (a noisy machine
    slows both alike). The first divergence is against greedy of the same dtype."""
    from workbench import service
    from workbench.methods import parse_method_spec, run_method

    task = service.sample_tasks()[0]
    for r in range(rounds):
        for dtype in ("float32", "bfloat16"):
            target = load_model("smollm2-135m", device="cpu", dtype=dtype)
            _, ids = service.build_prompt(target.tokenizer, task.input, task.context)
            greedy = None
            for spec in methods:
                name, overrides = parse_method_spec(spec)
                t0 = time.perf_counter()
                run = run_method(
                    name,
                    target,
                    ids,
                    {"max_new_tokens": tokens, **overrides},
                    prompt_text=task.input,
                    context=task.context,
                )
                seconds = time.perf_counter() - t0
                greedy = greedy or run.output_ids
                part = next((i for i, (a, b) in enumerate(zip(greedy, run.output_ids)) if a != b), None)
                where = "greedy's text" if part is None else f"leaves greedy at token {part}"
                print(f"round {r + 1} {dtype:8s} {spec:12s} {seconds:5.1f} s for {len(run.output_ids)} tokens, {where}")


def main() -> None:
    from core.timing import _cpuinfo

    cpu, flags = _cpuinfo()
    print(f"CPU {cpu}; flags {', '.join(flags)}")
    print(
        f"CPU has bf16 units: {_cpu_has_bf16()}; --dtype auto resolves to {resolve_dtype('auto')}; threads {torch.get_num_threads()}"
    )
    f32, b16 = gflops(torch.float32), gflops(torch.bfloat16)
    print(f"matmul 512x512: fp32 {f32:.1f} GFLOP/s, bf16 {b16:.2f} GFLOP/s (bf16/fp32 = {b16 / f32:.3f})")
    a, b = step_ms("float32"), step_ms("bfloat16")
    print(
        f"SmolLM2-135M one decoding step after 800 tokens (median of 5): fp32 {a:.0f} ms, bf16 {b:.0f} ms (bf16/fp32 = {b / a:.2f})"
    )
    for dtype in (torch.float32, torch.bfloat16):
        for name, vocab, hidden in (("SmolLM2", 49152, 576), ("Qwen2.5-0.5B", 151936, 896)):
            view, packed = head_ms(dtype, vocab, hidden)
            print(
                f"{name} output head on the last of 2 positions, {str(dtype)[6:]}: strided view {view:.1f} ms, packed {packed:.1f} ms"
            )
    demo_sample()


if __name__ == "__main__":
    main()
