"""findings: the analyses' results turned into a verdict a person can act on.

Each analysis answers one question (where turns diverge, which constants the cached
values pin to, what a replay predicts, what the usage says about itself, what the
engine's own log says). A *finding* is one thing that is costing cache, with the prompt
tokens it costs, the evidence and the change that fixes it; the report ranks them.

* `model` -- the values: `Finding`, `Summary`, `GateCheck`, `Gate`, `Report`;
* `evidence` -- `Evidence`, everything the finders read, gathered once (`gather`);
* `finders/` -- one module per family of findings, registered in ``FINDERS``: a new
  kind of finding is one module and one line there;
* `gate` -- the CI gate: thresholds and the stable-prefix baseline;
* `build` -- `build_report`: run the finders, rank, price, gate.
"""

from __future__ import annotations
