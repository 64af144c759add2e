"""`python -m engram.cli` runs the command line."""

import sys

from engram.cli import main

sys.exit(main())
