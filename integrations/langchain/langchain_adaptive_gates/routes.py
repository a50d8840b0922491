"""Which named route a gate decision takes: the decision itself and score bands.

``RouteChoice`` is the router's default choice: a usable draft answer
(``GateDecision.route``) takes the draft route,
a decision without a score (forced by the request or a fallback) goes by its verdict
to the retrieve or direct route, and a scored decision goes to the band of its score
(``ScoreBands``), or by its verdict when no bands are set. Any function
``(GateDecision) -> route name`` chooses as well.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from langchain_core.load.serializable import Serializable

from adaptive_gates import GateDecision
from adaptive_gates.extend import DIRECT, DRAFT, RETRIEVE

from .serialization import InPackageNamespace

#: A choice of route: the name of the route ``decision`` takes.
Choose = Callable[[GateDecision], str]


class ScoreBands(InPackageNamespace, Serializable):
    """Routes by the need score: each band holds the scores up to and including its
    edge, above the last edge is ``above``.

    ``ScoreBands([(0.3, "direct"), (0.7, "retrieve")], above="multi_step")`` sends a
    score of at most 0.3 to ``direct``, of at most 0.7 to ``retrieve`` and any higher
    one to ``multi_step``. Edges are inclusive as a gate's threshold is (it retrieves
    above it), so ``ScoreBands([(t, "direct")], above="retrieve")`` decides as the
    gate does at threshold ``t``. The bands read the score alone: a per-request
    threshold moves the gate's verdict, not the bands. LangChain serialises them (a
    router's JSON keeps its bands).
    """

    bands: list[tuple[float, str]]
    above: str

    def __init__(self, bands: Sequence[tuple[float, str]], *, above: str) -> None:
        if not bands:
            raise ValueError("ScoreBands needs at least one (edge, route) band")
        edges = [float(edge) for edge, _ in bands]
        if not all(math.isfinite(e) for e in edges) or any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError(f"band edges must be finite and strictly increasing, got {edges}")
        names = [name for _, name in bands] + [above]
        if not all(isinstance(name, str) and name for name in names):
            raise ValueError(f"route names must be non-empty strings, got {names}")
        super().__init__(bands=list(zip(edges, names[:-1])), above=above)

    @property
    def edges(self) -> list[float]:
        """The band edges, increasing."""
        return [edge for edge, _ in self.bands]

    @property
    def names(self) -> list[str]:
        """Each band's route, then ``above``."""
        return [name for _, name in self.bands] + [self.above]

    @property
    def routes(self) -> list[str]:
        """The route names the bands use, in band order, each once."""
        return list(dict.fromkeys(self.names))

    def route_of(self, score: float) -> str:
        """The route of a (non-NaN) ``score``."""
        return self.names[bisect.bisect_left(self.edges, score)]

    def __repr__(self) -> str:
        return f"ScoreBands({self.bands}, above={self.above!r})"


@dataclass(frozen=True)
class RouteChoice:
    """The default choice of route (see the module's docstring).

    Attributes:
        bands: the routes of scored decisions; ``None`` routes them by their verdict.
        drafts: whether a draft answer takes the ``DRAFT`` route.
    """

    bands: ScoreBands | None = None
    drafts: bool = True

    def __call__(self, decision: GateDecision) -> str:
        if self.drafts and decision.route == DRAFT:
            return DRAFT
        if self.bands is None or math.isnan(decision.score):
            return RETRIEVE if decision.retrieve else DIRECT
        return self.bands.route_of(decision.score)

    @property
    def routes(self) -> list[str]:
        """The routes it may choose: the router needs each of them."""
        bands = self.bands.routes if self.bands else []
        return list(dict.fromkeys([*([DRAFT] if self.drafts else []), DIRECT, RETRIEVE, *bands]))


def check_routes(choose: Choose, routes: Collection[str]) -> None:
    """Refuse a ``RouteChoice`` that may take a route not in ``routes``."""
    if isinstance(choose, RouteChoice):
        missing = [name for name in choose.routes if name not in routes]
        if missing:
            raise ValueError(
                f"route(s) {missing} are not among the router's routes {sorted(routes)}: every decision without"
                f" a score needs {DIRECT!r} and {RETRIEVE!r}, every band its route, and a choice of drafts"
                f" the {DRAFT!r} route (draft= not None)"
            )


def checked_route(name: object, routes: Collection[str]) -> str:
    """``name`` when it is one of ``routes``; else a ``ValueError`` listing them."""
    if not isinstance(name, str) or name not in routes:
        raise ValueError(f"the route choice gave {name!r}, which is not one of the routes {sorted(routes)}")
    return name
