"""``python -m dpmtv.cli``: the same as the ``dpmtv`` command."""

import sys

from dpmtv.cli import main

if __name__ == "__main__":  # importing this module (e.g. to list the package) runs nothing
    sys.exit(main(prog_name="dpmtv"))
