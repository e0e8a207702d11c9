"""Trees sized to the hardware and the context (`max_nodes=auto`; docs/AUTOMATIC_SETTINGS.md, "The sizer"; docs/ALGORITHMS.md, "Tree size from cost").

Each step the drafter proposes a large candidate tree; `TreeSizer.choose` keeps the prefix-closed subset
that maximises expected tokens per second of verification at the request's current context length L:

- the cost t(n, L) of one verification forward with n draft nodes after L cached tokens: a
  core.cost_model.CostModel (core.timing measures it per model, device, dtype and thread count), read at
  the L of every step, since every node attends to the whole prefix and costs more as the context grows;
- a(source, depth), the chance a node is accepted once its parent was: core.acceptance_prior's
  AcceptanceEstimate, which starts from the prior the caller passes (learned from stored traces of the
  same method and model; the default rate without one) and moves toward the request's own counts as they
  accumulate, so a lucky first step does not inflate the next trees; a node whose drafter scored it (the
  tree's `confidence`) is priced by that score, calibrated per confidence bucket the same way;
- `choose_nodes` (pure): each node's path product Π a(u) is the chance it is accepted; nodes are added
  in order of that product (a parent never after its child), and a longer prefix of that order replaces
  the current choice only when its expected tokens per second, E(S) / t(|S|, L) with
  E(S) = 1 + Σ_{v ∈ S} Π a(u), beat the current choice's by more than `margin` (2 %): a tree has to pay
  for itself with room to spare, and the empty tree (greedy's step) is always a candidate;
- `tree_may_pay` (pure): whether any tree could be chosen at this L given the highest rate a node could get; when
  none could, the step does not ask the drafter at all (`TreeSizer.drafts`, core.step.draft) and is greedy's;
- `DraftPause`: after REFUSALS drafted steps in a row whose every candidate the sizer refused, the next steps do not
  ask the drafter either (1 step, then 2, 4, up to PAUSE_MAX while drafted steps keep being refused; a kept tree
  ends it), so a request whose trees never pay takes greedy's step, drafting and pricing only now and then (and
  core.step hands the drafter the tokens it missed when it is next asked).
- probes (`PROBE`): a step whose candidates were all refused keeps its best node anyway when, priced at an optimistic
  rate (the posterior mean plus PROBE_OPTIMISM standard deviations of the request's own nodes and the prior's weight,
  not of the stored nodes behind the prior's centre), one node would pay; otherwise a low stored prior learned on
  other prompts is never unlearned, since a request learns only from the nodes it verifies. Where a node costs
  nearly a forward no such rate pays and no probe is made.

A run's trees depend on the prior it starts from and on the cost model, not on the runs before it: a
relaxed run gives the same output however many runs came before it (a resumed benchmark equals an
uninterrupted one), and the run records both in its params (core.methods.run).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from core.acceptance_prior import AcceptanceEstimate, AcceptancePrior
from core.tree import DraftTree
from core.types import ACCEPTED, Decision

AUTO_CANDIDATES = 64  # draft nodes a drafter proposes under max_nodes=auto, for the sizer to choose from
MARGIN = 0.02  # a larger tree must promise this much more tokens per second than the current choice
# Standard deviations taken off each node's estimated rate before sizing (0: the posterior mean). On by default: in
# float32 it removes the rejected trees that cost the short-prompt families 8-10 %, in bfloat16 it keeps the pooled
# speed-ups within 3 % (docs/AUTOMATIC_SETTINGS.md, "Empty steps and cautious rates", changes 10-12).
CAUTION = 1.0
# Drafted steps in a row whose candidates were all refused before drafting pauses (DraftPause), and the longest pause:
# at 64 a request whose trees keep being refused asks its drafter one step in 65 (at 8, one in 9 cost float32 SmolLM2
# steps about 0.1 ms each; docs/AUTOMATIC_SETTINGS.md, change 13).
REFUSALS = 4
PAUSE_MAX = 64
PAUSE = True  # whether a sizer pauses drafting after refusals (DraftPause); measured in docs/AUTOMATIC_SETTINGS.md
# Probes: a step whose candidates were all refused at the cautious rates keeps its best node anyway when, priced at
# an optimistic rate (PROBE_OPTIMISM standard deviations above the mean, the spread of the request's own nodes and the
# prior's weight: AcceptanceEstimate.optimistic), one node would pay. Without them a low stored prior from other
# prompts is never unlearned: the request verifies no node (docs/AUTOMATIC_SETTINGS.md, "A low stored prior").
PROBE = True
PROBE_OPTIMISM = 2.0

Cost = Callable[[float, float], float]  # t(n, L) in seconds: a core.cost_model.CostModel


@dataclass(frozen=True)
class CostCurve:
    """t(n) in seconds at one context length, measured at `sizes` (ascending, starting at 0): the slice of a
    CostModel that displays read (the UI's speed note); the sizer reads the whole CostModel."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self):
        if len(self.sizes) < 2 or len(self.sizes) != len(self.seconds) or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError("a cost curve needs ≥ 2 distinct ascending sizes, one time each")
        if any(not t > 0 for t in self.seconds):
            raise ValueError("a cost curve's times must be positive")

    def __call__(self, n: int) -> float:
        """Linear between measured sizes, extended along the last segment's slope beyond them."""
        s, t = self.sizes, self.seconds
        i = min(max(bisect.bisect_right(s, n) - 1, 0), len(s) - 2)
        slope = (t[i + 1] - t[i]) / (s[i + 1] - s[i])
        return max(t[i] + slope * (n - s[i]), t[0])


def path_products(tree: DraftTree, rates: Sequence[float]) -> list[float]:
    """Π a(u) over each node's path from the root (the root: 1)."""
    out = [1.0] * len(tree)
    for i in range(1, len(tree)):  # parents come before children
        out[i] = out[tree.parents[i]] * rates[i]
    return out


def ranked_nodes(tree: DraftTree, rates: Sequence[float]) -> tuple[list[int], list[float]]:
    """Draft nodes by descending path product (ties: shallower, then earlier), and every node's product:
    any prefix of that order is prefix-closed, since a ≤ 1 puts a parent before its children."""
    products = path_products(tree, rates)
    return sorted(range(1, len(tree)), key=lambda i: (-products[i], tree.depths[i], i)), products


def _better(rate: float, best: float, margin: float) -> bool:
    """A larger tree replaces the current choice only when it promises more than `margin` more tokens per second."""
    return rate > best * (1.0 + margin)


def common_size(
    rows: Sequence[tuple[Sequence[int], Sequence[float]]],
    cost: Cost,
    context_lens: Sequence[int],
    margin: float = MARGIN,
) -> int:
    """One tree size k for every row of a batch (rows pad to the widest tree, so a node one row adds costs
    every row a slot): the k with the most expected tokens over all rows per second of t(B·(k + 1) − 1, L),
    L the longest row's context (the batch's cache is as long as its longest row), each row keeping the first
    k nodes of its `ranked_nodes` order; a larger k must beat the current one by `margin`. Pure."""
    b = len(rows)
    length = max(context_lens, default=0)
    longest = max((len(order) for order, _ in rows), default=0)
    expected = [1.0] * b
    best_k, best_rate = 0, b / cost(b - 1, length)
    for k in range(1, longest + 1):
        for r, (order, products) in enumerate(rows):
            if k <= len(order):
                expected[r] += products[order[k - 1]]
        rate = sum(expected) / cost(b * (k + 1) - 1, length)
        if _better(rate, best_rate, margin):
            best_k, best_rate = k, rate
    return best_k


def tree_may_pay(
    cost: Cost,
    context_len: int,
    best_rate: float,
    max_nodes: int,
    margin: float = MARGIN,
    sizes: Sequence[int] | None = None,
) -> bool:
    """Whether any tree of at most `max_nodes` draft nodes could be chosen over the empty tree after `context_len`
    cached tokens, when no node is priced above `best_rate` (a node's path product is at most its depth-1
    ancestor's rate): a k-node tree expects at most 1 + k·best_rate tokens, so it is chosen only if
    (1 + k·best_rate) / t(k, L) beats 1 / t(0, L) by the margin for some k. False: the step can skip the drafter.

    `sizes`: the sizes where t is measured (a CostModel's), between which t is linear in k; on such a segment
    (1 + k·r) / (a + b·k) is monotone, so its ends are the only k to check. None: every k. Pure."""
    if max_nodes < 1:
        return False
    ks = (
        range(1, max_nodes + 1)
        if sizes is None
        else sorted({1, max_nodes} | {int(s) for s in sizes if 0 < s <= max_nodes})
    )
    empty = (1.0 + margin) / cost(0, context_len)
    return any((1.0 + k * best_rate) / cost(k, context_len) > empty for k in ks)


def step_may_pay(
    cost: Cost,
    context_len: int,
    best_rate: float,
    probe_rate: float | None,
    max_nodes: int,
    margin: float = MARGIN,
    sizes: Sequence[int] | None = None,
) -> bool:
    """Whether a step may keep any draft node (TreeSizer.drafts): a tree of up to `max_nodes` nodes priced at most
    `best_rate` a node, or a probe's one node priced at most `probe_rate` (None: no probes). The probe's optimistic
    rate bounds one node only, not a whole tree. Pure."""
    return tree_may_pay(cost, context_len, best_rate, max_nodes, margin, sizes) or (
        probe_rate is not None and tree_may_pay(cost, context_len, probe_rate, min(1, max_nodes), margin, sizes)
    )


def linear_until(cost: Cost, context_len: int, max_nodes: int) -> int | None:
    """A context length L1 ≥ `context_len` such that, for every k ≤ `max_nodes`, t(k, L) is linear in L on
    [context_len, L1] (None: not known). For a CostModel read at k up to its largest measured size: bilinear inside its
    grid, constant below the shortest length, linear along fixed slopes beyond the longest (there the horizon is another
    `context_len` tokens, to be checked again). `tree_may_pay` compares linear functions of L, so what it says at both
    ends holds between them when it says False at both. Pure."""
    lengths, sizes = getattr(cost, "lengths", None), getattr(cost, "sizes", None)
    if not lengths or not sizes or max_nodes > sizes[-1]:
        return None
    if context_len < lengths[0]:
        return int(lengths[0])
    if context_len >= lengths[-1]:
        return 2 * int(context_len)
    return int(lengths[bisect.bisect_right(lengths, context_len)])


def choose_nodes(
    tree: DraftTree,
    rates: Sequence[float],
    cost: Cost,
    context_len: int,
    max_nodes: int | None = None,
    margin: float = MARGIN,
) -> tuple[list[int], float]:
    """The draft nodes to keep (ids in tree order) and their expected tokens E(S), for a forward after
    `context_len` cached tokens.

    Nodes are added by descending path product (ties: shallower, then earlier), which keeps every
    parent before its children since a ≤ 1; of the prefixes of that order (at most `max_nodes` long), a
    longer one replaces the current choice (at first the empty tree) only when its expected tokens per
    second of t(|S|, L) beat the current choice's by more than `margin`. Pure."""
    order, products = ranked_nodes(tree, rates)
    if max_nodes is not None:
        order = order[:max_nodes]
    best_k, best_rate, expected = 0, 1.0 / cost(0, context_len), 1.0
    for k, node in enumerate(order, start=1):
        expected += products[node]
        rate = expected / cost(k, context_len)
        if _better(rate, best_rate, margin):
            best_k, best_rate = k, rate
    kept = sorted(order[:best_k])
    return kept, 1.0 + sum(products[i] for i in kept)


@dataclass
class StepClock:
    """The online check (`TreeSizer(..., clock=...)`): each step's measured seconds per emitted token, with trees
    and without, decayed so that recent steps count most (the context grows, and with it what a node costs).

    The forward-time model t(n, L) leaves out what a tree costs outside the forward (drafting, the statistics of
    every node's row, the walk, the traces); the clock measures all of it: the time between two calls of
    `choose` is one whole step. When the steps with trees emit tokens no faster than the empty steps (by the
    margin), trees are switched off for BACKOFF steps, then tried afresh; while trees are drafted, one step in
    PROBE_EVERY is left empty so that the empty step's time stays measured."""

    read: Callable[[], float]
    tree: list[float] = field(default_factory=lambda: [0.0, 0.0])  # decayed (seconds, tokens) of steps with trees
    empty: list[float] = field(default_factory=lambda: [0.0, 0.0])  # the same for empty steps
    tree_steps: int = 0  # tree steps measured since trees were last switched on
    off: int = 0  # steps left with trees switched off
    since_empty: int = 0
    last: float | None = None
    pending: tuple[int, int] | None = None  # (tree size, tokens emitted) of the step being timed

    DECAY = 0.9  # weight of the previous steps' sums at each new step
    WINDOW = 6  # tree steps measured before the check may switch trees off
    PROBE_EVERY = 12
    BACKOFF = 32

    def tick(self) -> None:
        """At each `choose`: the previous step ended here."""
        now = self.read()
        if self.last is not None and self.pending is not None:
            size, tokens = self.pending
            bucket = self.tree if size else self.empty
            bucket[0] = bucket[0] * self.DECAY + (now - self.last)
            bucket[1] = bucket[1] * self.DECAY + tokens
            self.tree_steps += size > 0
        self.last, self.pending = now, None

    def allow(self, wanted: int, margin: float) -> bool:
        """Whether this step may draft the `wanted` nodes the model chose (False: an empty step)."""
        if wanted == 0:
            return False
        if self.off > 0:
            self.off -= 1
            if self.off == 0:  # try trees afresh
                self.tree, self.tree_steps = [0.0, 0.0], 0
            return False
        if self.since_empty >= self.PROBE_EVERY:
            return False
        if self.tree_steps >= self.WINDOW and self.empty[1] > 0 and self.tree[1] > 0:
            tree_rate, empty_rate = self.tree[1] / self.tree[0], self.empty[1] / self.empty[0]
            if not tree_rate > empty_rate * (1.0 + margin):
                self.off = self.BACKOFF
                return False
        return True

    def chose(self, size: int) -> None:
        self.since_empty = self.since_empty + 1 if size else 0
        self.pending = (size, 0)

    def emitted(self, tokens: int) -> None:
        if self.pending is not None:
            self.pending = (self.pending[0], tokens)


@dataclass
class DraftPause:
    """Whether to ask the drafter this step, from the sizer's recent verdicts on its proposals: after `refusals`
    drafted steps in a row whose candidates were all refused, drafting pauses for 1 step, then for twice as long
    after every further refused step (up to `longest`); a step whose tree is kept ends the pause. What it saves is
    the drafter's proposal and the sizer's pricing on steps that end as greedy's anyway (about 1 % of a float32
    step on SmolLM2); what it may cost is a tree that would have paid during a pause."""

    refusals: int = REFUSALS
    longest: int = PAUSE_MAX
    refused: int = 0  # drafted steps in a row whose candidates were all refused
    pause: int = 0  # the length of the last pause (doubles while refusals go on)
    left: int = 0  # steps of the current pause still to skip

    def drafts(self) -> bool:
        """Whether this step asks the drafter (False while a pause lasts; each call is one step)."""
        if self.left > 0:
            self.left -= 1
            return False
        return True

    def chose(self, candidates: int, kept: int) -> None:
        """A drafted step's outcome: `candidates` draft nodes proposed, `kept` of them kept (an empty proposal
        says nothing about the sizer's prices and leaves the count as it is)."""
        if candidates == 0:
            return
        if kept:
            self.refused, self.pause = 0, 0
            return
        self.refused += 1
        if self.refused >= self.refusals:
            self.pause = min(max(2 * self.pause, 1), self.longest)
            self.left = self.pause


class TreeSizer:
    """`max_nodes=auto` for one request: cuts each proposed tree to its best size at the request's context
    length and learns from each verdict, starting from `prior` (core.acceptance_prior; None: the default rate).
    With a `clock` (seconds; core.timing.step_clock), the online check (StepClock) also times every step and
    falls back to empty steps while trees do not pay. `caution` (CAUTION) prices nodes below their mean rates;
    `pause` (PAUSE) skips the drafter for a while after its candidates were refused several steps in a row."""

    def __init__(
        self,
        cost: Cost,
        prior: AcceptancePrior | None = None,
        margin: float = MARGIN,
        clock: Callable[[], float] | None = None,
        caution: float | None = None,
        pause: bool | None = None,
        probe: bool | None = None,
        drafter_sources: Iterable[str] = (),
        scored: bool = False,
    ):
        if not margin >= 0:
            raise ValueError(f"the sizer's margin must be ≥ 0, got {margin}")
        self.cost, self.margin = cost, margin
        self.caution = CAUTION if caution is None else caution  # read when built, so a caller may set CAUTION
        self.rates = AcceptanceEstimate(prior)
        self.clock = StepClock(clock) if clock is not None else None
        self.sources: set[str] = set()  # draft sources this request's proposals have shown
        # The sources the drafter declares (Drafter.node_sources): priced until its first proposal shows which it uses
        self.declared = frozenset(drafter_sources)
        self.declared_scored = scored  # the drafter says its nodes carry confidences (until a proposal shows it)
        self.scored = False  # whether a proposal carried drafter confidences (priced up to certainty)
        # Read when built, as CAUTION is; without a pause the drafter is asked whenever a tree may pay.
        self.pause = DraftPause() if (PAUSE if pause is None else pause) else None
        self.probe = PROBE if probe is None else probe  # read when built, as CAUTION is
        # ((best, probe rate, max_nodes), L0, L1): no tree paid at those rates anywhere in [L0, L1] (drafts skips
        # the cost reads)
        self.no_tree: tuple[tuple[float, float | None, int], int, int] | None = None

    @property
    def prior(self) -> AcceptancePrior:
        return self.rates.prior

    def choose(self, tree: DraftTree, context_len: int) -> DraftTree:
        """`tree` cut to the size that pays most after `context_len` cached tokens (the root's position)."""
        if self.clock is not None:
            self.clock.tick()
        self.sources.update(tree.sources[1:])
        self.scored = self.scored or any(c is not None for c in tree.confidence)
        kept: list[int] = []
        probed = False
        if tree.num_draft:
            kept, _ = choose_nodes(tree, self.node_rates(tree), self.cost, context_len, margin=self.margin)
            if not kept and self.probe:  # one node, if an optimistic rate says it could pay (PROBE)
                optimistic = self.node_rates(tree, optimistic=True)
                kept, _ = choose_nodes(tree, optimistic, self.cost, context_len, max_nodes=1, margin=self.margin)
                probed = bool(kept)
        if self.pause is not None:  # a probe is a refusal to the pause: probes come on its schedule
            self.pause.chose(tree.num_draft, 0 if probed else len(kept))
        if self.clock is not None:
            if not self.clock.allow(len(kept), self.margin):
                kept = []
            self.clock.chose(len(kept))
        return tree.subset(kept) if tree.num_draft else tree

    def best_rate(self) -> float | None:
        """The highest rate a depth-1 node of a chosen tree could be priced at now (bounds every node's path product),
        over the known sources (known_sources); None while none is known, and 1.0 when nodes carry drafter
        confidences (a confident node may be priced near certainty)."""
        sources = self.known_sources()
        if not sources:
            return None
        if self.confident():
            return 1.0
        return max(self.rates.rate(source, 1, caution=self.caution) for source in sources)

    def probe_rate(self) -> float | None:
        """The highest optimistic rate a probe's one node could be priced at now (None: no probes, or no source
        known): a probe keeps one node, so only a one-node tree at this rate needs to pay (step_may_pay)."""
        sources = self.known_sources() if self.probe else set()
        if not sources:
            return None
        if self.confident():
            return 1.0
        return max(self.rates.optimistic(source, 1, PROBE_OPTIMISM) for source in sources)

    def confident(self) -> bool:
        """Whether a node may be priced near certainty: it carries a drafter confidence (shown by a proposal, or before
        the first one declared by the drafter), or the prior holds a calibration of confidences."""
        declared = not self.sources and self.declared_scored
        return self.scored or declared or bool(self.rates.prior.calibration)

    def known_sources(self) -> set[str]:
        """The sources a node may come from: those this request's proposals showed (before the first: the drafter's
        declared ones; none declared: unknown, the empty set), with the prior's."""
        shown = self.sources or set(self.declared)
        return shown | {source for source, _ in self.rates.prior.counts} if shown else set()

    def drafts(self, context_len: int, max_nodes: int = AUTO_CANDIDATES) -> bool:
        """Whether this step should ask the drafter at all: False when no tree of up to `max_nodes` nodes could pay
        at this context length, whatever the drafter proposes (step_may_pay: a tree at the regular rates or a probe's
        node at the optimistic one), or while drafting pauses after refused proposals (DraftPause); the step is then
        greedy's. The online check's clock still ticks (choose on the root-only tree). Before the first proposal the
        drafter's declared sources are priced; with none declared the first step asks it, to see them."""
        if self.pause is not None and not self.pause.drafts():
            return False  # before pricing anything: a paused step costs what greedy's does
        best = self.best_rate()
        if best is None:
            return True
        rates = (best, self.probe_rate(), max_nodes)
        if self.no_tree is not None:
            known, start, end = self.no_tree
            if known == rates and start <= context_len <= end:
                return False  # the bound's answer cannot have changed: same rates, same linear stretch of t
        sizes = getattr(self.cost, "sizes", None)
        if step_may_pay(self.cost, context_len, *rates, self.margin, sizes):
            return True
        until = linear_until(self.cost, context_len, max_nodes)
        if until is not None and not step_may_pay(self.cost, until, *rates, self.margin, sizes):
            self.no_tree = (rates, context_len, until)
        return False

    def ranked(self, tree: DraftTree) -> tuple[list[int], list[float]]:
        """This request's ranking of `tree`'s nodes (for a batch's common size: common_size)."""
        return ranked_nodes(tree, self.node_rates(tree))

    def node_rates(self, tree: DraftTree, optimistic: bool = False) -> list[float]:
        """Each node's estimated acceptance given its parent's (the root: 1); a node its drafter gave a confidence
        is priced from it (AcceptanceEstimate.rate). `optimistic`: the probe's rates (AcceptanceEstimate.optimistic)
        for nodes without a confidence."""

        def rate(i: int) -> float:
            source, depth, confidence = tree.sources[i], tree.depths[i], tree.confidence_of(i)
            if optimistic and confidence is None:
                return self.rates.optimistic(source, depth, PROBE_OPTIMISM)
            return self.rates.rate(source, depth, confidence, self.caution)

        return [1.0] + [rate(i) for i in range(1, len(tree))]

    def observe(self, tree: DraftTree, decisions: Sequence[Decision | str]) -> None:
        """Learn from one step's verdict (its decision per node, the root first): the accepted path is the root
        and the nodes accepted or rescued; the nodes judged are those whose parent is on it."""
        path = [0] + [i for i in range(1, len(tree)) if decisions[i] in ACCEPTED]
        self.rates.observe(tree, path)
        if self.clock is not None:
            self.clock.emitted(len(path))  # the accepted tokens and the bonus
