"""``python -m structopt``: the ``structopt`` command (through its Ctrl-C-safe entry point)."""

import sys

from structopt._entry import console

if __name__ == "__main__":
    sys.exit(console())
