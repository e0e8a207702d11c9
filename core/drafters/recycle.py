"""Token Recycling (arXiv 2408.08696): draft from what the target itself predicted after each token.

A table R (vocabulary × K, −1 = empty) keeps, for every token x, the target's top-K ids at the last
position where x was fed. Every forward refreshes it: the prefill's prompt positions, then every row of
every verified tree (tree_topk). Drafting from the pending token expands a static template of
(parent, rank) nodes: a node's token is R[token of its parent][rank]; an empty entry drops the node and
its subtree. Verification is any tree's (strict by default, so `recycle` is lossless); nodes carry the
source `recycled`.

The two decisions are pure functions of arrays, testable without a model: `rows_to_write` (what a
forward writes into R) and `expand` (the tree a template draws from R). `RecycleTable` holds R with a
lock; `shared_table` gives one per model fingerprint and process, optionally loaded from and saved to
`workbench_home()/recycle/` (warm=1).
"""

from __future__ import annotations

import atexit
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.drafters.base import DraftEnv, Proposal, TopK, TreeObserver, TreeTopK
from core.params import auto_or
from core.persist import atomic_write, process_table, save_tables
from core.tree import DraftTree
from core.types import Source

K = 8  # top-k ids kept per token (the paper's k)
SOURCE: Source = "recycled"

Template = list[tuple[int, int]]  # node j + 1 of the tree: (parent node, rank in R[parent's token]); node 0 = root


def from_paths(paths: Sequence[Sequence[int]]) -> Template:
    """The authors' notation (a node = its path of ranks from the root, [0, 1] = rank 1 under rank 0)
    as (parent, rank) pairs; every path's prefix must come earlier in the list."""
    index: dict[tuple[int, ...], int] = {(): 0}
    out: Template = []
    for path in paths:
        key = tuple(path)
        if key[:-1] not in index:
            raise ValueError(f"template path {list(key)} comes before its parent {list(key[:-1])}")
        out.append((index[key[:-1]], key[-1]))
        index[key] = len(out)
    return out


# The paper's static tree (Luowaterbi/TokenRecycling, model/recycling/tree_template_.py, version "2.2.2";
# the same as smpanaro/token-recycling's Figure 5 layers): 80 nodes, depths 1-6 with 8, 21, 25, 15, 8, 3 nodes.
PAPER_PATHS = [
    [0],
    [1],
    [2],
    [3],
    [4],
    [5],
    [6],
    [7],
    [0, 0],
    [0, 1],
    [0, 2],
    [0, 3],
    [0, 4],
    [0, 5],
    [0, 6],
    [0, 7],
    [1, 0],
    [1, 1],
    [1, 2],
    [1, 3],
    [2, 0],
    [2, 1],
    [2, 2],
    [3, 0],
    [3, 1],
    [4, 0],
    [5, 0],
    [6, 0],
    [7, 0],
    [0, 0, 0],
    [0, 0, 1],
    [0, 0, 2],
    [0, 0, 3],
    [0, 0, 4],
    [0, 0, 5],
    [0, 0, 6],
    [0, 0, 7],
    [0, 1, 0],
    [0, 1, 1],
    [0, 1, 2],
    [0, 2, 0],
    [0, 2, 1],
    [0, 3, 0],
    [0, 4, 0],
    [0, 5, 0],
    [0, 6, 0],
    [0, 7, 0],
    [1, 0, 0],
    [1, 0, 1],
    [1, 1, 0],
    [2, 0, 0],
    [3, 0, 0],
    [4, 0, 0],
    [5, 0, 0],
    [0, 0, 0, 0],
    [0, 0, 0, 1],
    [0, 0, 0, 2],
    [0, 0, 0, 3],
    [0, 0, 0, 4],
    [0, 0, 1, 0],
    [0, 0, 1, 1],
    [0, 0, 2, 0],
    [0, 0, 3, 0],
    [0, 0, 4, 0],
    [0, 1, 0, 0],
    [0, 2, 0, 0],
    [1, 0, 0, 0],
    [2, 0, 0, 0],
    [3, 0, 0, 0],
    [0, 0, 0, 0, 0],
    [0, 0, 0, 0, 1],
    [0, 0, 0, 0, 2],
    [0, 0, 0, 1, 0],
    [0, 0, 0, 2, 0],
    [0, 0, 1, 0, 0],
    [0, 1, 0, 0, 0],
    [1, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 1],
    [0, 0, 0, 1, 0, 0],
]
PAPER_TEMPLATE = from_paths(PAPER_PATHS)


def by_value(template: Template, rank_rate: Sequence[float]) -> Template:
    """The template's nodes reordered so that every prefix is the best subtree of its size under a simple
    model: a node at rank r is accepted, given its parent was, with probability rank_rate[r], so its
    value is the product of its path's rates (as Medusa / Sequoia size trees). Parents keep coming
    before children (a child's value never exceeds its parent's; ties go to the earlier node)."""
    value = [1.0]
    for parent, rank in template:
        value.append(value[parent] * rank_rate[rank])
    order = sorted(range(1, len(template) + 1), key=lambda j: (-value[j], j))
    new_index = {0: 0}
    out: Template = []
    for j in order:
        parent, rank = template[j - 1]
        out.append((new_index[parent], rank))
        new_index[j] = len(out)
    return out


# Acceptance of a recycled node given its parent's, by rank: `benchmarks/bench_recycle.py --rank-rates
# --threads 1 --max-new-tokens 48` on SmolLM2-135M bf16, 26 held-out Spec-Bench items, measured
# (0.442, 0.092, 0.042, 0.029, 0.011, 0.013, 0.016, 0.011); ranks 4-7 (a few hundred nodes, noise) pooled so
# the rates never rise with rank. They order the paper's tree, so its first n nodes are the n-node template.
RANK_RATE = (0.442, 0.092, 0.042, 0.029, 0.012, 0.012, 0.012, 0.012)
TEMPLATE = by_value(PAPER_TEMPLATE, RANK_RATE)


def expand(template: Template, table: np.ndarray, root: int, max_nodes: int | None = None) -> DraftTree:
    """The draft tree `template` draws from `table` for the pending token `root`: node j's token is
    table[token(parent)][rank]; a −1 entry (or a rank the table does not keep) drops the node and its
    subtree. The first `max_nodes` template nodes only (all when None)."""
    tree = DraftTree.root_only(root)
    node_of = {0: 0}  # template node -> tree node, for the nodes kept
    for j, (parent, rank) in enumerate(template[:max_nodes] if max_nodes is not None else template, start=1):
        at = node_of.get(parent)
        if at is None or rank >= table.shape[1]:
            continue
        token = int(table[tree.tokens[at], rank])
        if token >= 0:
            node_of[j] = tree.add(at, token, SOURCE)
    return tree


def rows_to_write(tokens: np.ndarray, top: np.ndarray, path: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """What one forward writes into the table: for every input position with token x, R[x] <- that
    position's top-k. When a token occurs at several positions, the accepted path's row wins (it is the
    text that was committed), then the later row. Returns (unique token ids, their rows)."""
    on_path = set(path)
    order = [i for i in range(len(tokens)) if i not in on_path] + list(path)
    last: dict[int, int] = {}
    for i in order:
        last[int(tokens[i])] = i
    rows = np.fromiter(last.values(), dtype=np.int64, count=len(last))
    return np.fromiter(last.keys(), dtype=np.int64, count=len(last)), np.asarray(top)[rows]


class RecycleTable:
    """R: (vocabulary, K) int32 ids, −1 = empty; updates under a lock (requests of one process share it)."""

    def __init__(self, vocab: int, k: int = K, ids: np.ndarray | None = None, path: Path | None = None):
        self.ids = np.full((vocab, k), -1, np.int32) if ids is None else np.ascontiguousarray(ids, np.int32)
        self.path = path  # where warm=1 saves it
        self.loaded = False
        self._lock = threading.Lock()

    @property
    def k(self) -> int:
        return self.ids.shape[1]

    def write(self, tokens: np.ndarray, top: np.ndarray, path: Sequence[int] = ()) -> None:
        rows, values = rows_to_write(tokens, top[:, : self.k], path)
        with self._lock:
            self.ids[rows, : values.shape[1]] = values

    def state(self) -> dict[str, Any]:
        """What a run records about the table it started from: a hash of its contents and its filled rows."""
        with self._lock:
            sha = hashlib.sha256(self.ids.tobytes()).hexdigest()[:16]
            return {"table_sha": sha, "table_rows": int((self.ids[:, 0] >= 0).sum())}

    def merge_file(self, path: Path) -> None:
        """Fill the rows still empty here from a saved table (rows learned in this process win)."""
        saved = np.load(path)
        if saved.shape != self.ids.shape:
            return  # another vocabulary or k: ignore the file, it will be overwritten
        with self._lock:
            empty = self.ids[:, 0] < 0
            self.ids[empty] = saved[empty]

    def save(self, path: Path | None = None) -> Path:
        path = Path(path or self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            data = self.ids.copy()
        atomic_write(path, lambda fh: np.save(fh, data))
        return path


def table_path(fingerprint: str, k: int = K) -> Path:
    from core.models import workbench_home

    return workbench_home() / "recycle" / f"{fingerprint}-k{k}.npy"


_SHARED: dict[tuple[str, int], RecycleTable] = {}


def shared_table(target, warm: bool = False, k: int = K) -> RecycleTable:
    """The process-wide table of a model (by fingerprint): it persists across requests. With `warm`,
    the rows saved under the workbench home fill it on first use and it is saved after each run
    (`core.methods.run_method`) and at exit."""

    def load_once(table: RecycleTable) -> None:
        if warm and not table.loaded:
            table.path = table_path(target.fingerprint, k)
            if table.path.is_file():
                table.merge_file(table.path)
            table.loaded = True

    return process_table(_SHARED, (target.fingerprint, k), lambda: RecycleTable(target.vocab_size, k), load_once)


@atexit.register
def _save_warm() -> None:
    save_tables(_SHARED.values(), lambda table: table.loaded, "recycle table")


class RecycleDrafter(TreeObserver):
    """Token Recycling: the template expanded from the table at the pending token; the table learns
    from the prefill (prefill_topk) and from every row of every verified tree (tree_topk)."""

    generated_topk = 0
    joins_commits = True  # commit keeps nothing (the table learns in observe_tree)
    node_sources: frozenset[Source] = frozenset({SOURCE})
    scores_nodes = False

    def __init__(self, table: RecycleTable, template: Template = TEMPLATE, max_nodes: int | None = None):
        self.table, self.template, self.max_nodes = table, template, max_nodes
        self.prefill_topk = self.tree_topk = table.k

    @classmethod
    def from_params(cls, params: dict[str, Any], env: DraftEnv) -> "RecycleDrafter":
        if env.table is None:
            raise ValueError("the recycle drafter needs a table (core.methods.build gives the model's shared one)")
        return cls(env.table, max_nodes=auto_or(params["max_nodes"], None))  # auto: the whole template, for core.sizing

    def begin(self, prompt_ids: list[int], prefill: TopK | None) -> None:
        if prefill is not None and len(prefill.ids):  # row i is the distribution at prompt position i
            self.table.write(np.asarray(prompt_ids[: len(prefill.ids)]), prefill.ids)

    def propose(self, sequence: list[int]) -> Proposal:
        return Proposal(expand(self.template, self.table.ids, sequence[-1], self.max_nodes))

    def observe_tree(self, forward: TreeTopK) -> None:
        self.table.write(forward.tokens, forward.ids, forward.path)

    def commit(self, new_tokens: list[int], predictions: np.ndarray | None) -> None:
        pass
