"""``python -m benchmarks [--quick] [--only TEXT] [--out FOLDER]``: see benchmarks/run.py."""
import sys

from benchmarks.run import main

sys.exit(main())
