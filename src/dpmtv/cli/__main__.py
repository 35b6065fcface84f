"""``python -m dpmtv.cli``: the same as the ``dpmtv`` command."""

import sys

from dpmtv.cli import main

sys.exit(main())
