"""``dpmtv demo``: the paper's comparison on the packaged embedded model, on the CPU — a preset
of ``dpmtv eval``.

For every task of the embedded suite and every seed, the ``embedded:TASK`` benchmark (N private
records, the task's test images; :mod:`dpmtv.eval.benchmarks.embedded`) is evaluated by
:func:`dpmtv.eval.runner.run_evaluation`: zero-shot, 16-shot ICL (token space, non-private), MTV
(the unclipped mean, non-private) and DP-MTV at each ε (the real build: per-layer clipping, the
library's Gaussian release, noise once per release; seeded, as every evaluation), scored by the
greedy answer word. Seen tasks (trained on) and held-out tasks (never trained on, nor their
complements: the model learns them from the demonstrations alone) are reported separately; ICL
is also scored at 1, 4, 16 and 64 shots for the shots plot. The head set and clip norms were
chosen on public data when the model was trained (``dpmtv_defaults.json`` beside the weights) and
cost no privacy. The ε = 1 artifact of one task is built with the real pipeline (secure noise)
and written out.
"""

from dpmtv.demo.config import PRIVACY_STATEMENT, DemoConfig, default_config, load_defaults
from dpmtv.demo.report import (
    RERUN_NOTE,
    command_line,
    privacy_utility_by_group_figure,
    summarise_groups,
    summarise_over_tasks,
)
from dpmtv.demo.runs import run_demo
from dpmtv.demo.story import gain_kept

__all__ = [
    "PRIVACY_STATEMENT",
    "RERUN_NOTE",
    "DemoConfig",
    "command_line",
    "default_config",
    "gain_kept",
    "load_defaults",
    "privacy_utility_by_group_figure",
    "run_demo",
    "summarise_groups",
    "summarise_over_tasks",
]
