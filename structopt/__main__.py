"""``python -m structopt``: the ``structopt`` command."""

import sys

from structopt.cli import main

if __name__ == "__main__":
    sys.exit(main())
