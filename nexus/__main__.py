"""``python -m nexus``: the ``nexus`` command (``nexus.cli.main``), for where the console
script is not on PATH (a venv that is not activated, ``python3.12 -m nexus``)."""

import sys

from nexus.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
