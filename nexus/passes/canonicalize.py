"""``canonicalize``: constant folding, CFG simplification, CSE and DCE repeated until none
of them changes anything (folding a branch condition lets simplifycfg drop a branch,
which leaves a trivial Phi whose users fold in turn, and so on)."""

from __future__ import annotations

from dataclasses import dataclass

from nexus.ir.graph import Graph
from nexus.passes.constfold import ConstFold
from nexus.passes.cse import CSE
from nexus.passes.dce import DCE
from nexus.passes.manager import Pass
from nexus.passes.simplifycfg import SimplifyCFG


@dataclass(frozen=True)
class Canonicalize(Pass):
    """Run constfold, simplifycfg, cse and dce to a fixpoint."""

    name = "canonicalize"
    preserves = frozenset({"no_unreachable"})

    max_rounds: int = 20

    def apply(self, g: Graph) -> dict[str, int]:
        total: dict[str, int] = {}
        passes: list[Pass] = [SimplifyCFG(), ConstFold(), CSE(), DCE()]
        for _ in range(self.max_rounds):
            changed = False
            for p in passes:
                # CSE needs no unreachable blocks; SimplifyCFG (first) removes them.
                counts = p.apply(g)
                for k, v in counts.items():
                    total[f"{p.name}.{k}"] = total.get(f"{p.name}.{k}", 0) + v
                changed |= any(counts.values())
            if not changed:
                break
        return total
