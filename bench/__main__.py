"""``python -m bench``: run the benchmark suite (see bench/run.py)."""

from bench.run import main

raise SystemExit(main())
