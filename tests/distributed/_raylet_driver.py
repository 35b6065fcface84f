"""``python tests/distributed/_raylet_driver.py MARKER dpmtv-args...``: the ``dpmtv`` command
line, with MARKER touched when the driver is about to send its first batches (so that a test
can kill the raylet a known time into extraction). Nothing else differs from ``dpmtv``."""

from __future__ import annotations

import sys
from pathlib import Path

import dpmtv.distributed.ray_executor as ray_executor
from dpmtv.cli import main

_marker = Path(sys.argv.pop(1))
_split_batches = ray_executor.split_batches


def _split_batches_and_say_so(*args, **kwargs):
    _marker.touch()
    return _split_batches(*args, **kwargs)


ray_executor.split_batches = _split_batches_and_say_so
if __name__ == "__main__":
    sys.exit(main())
