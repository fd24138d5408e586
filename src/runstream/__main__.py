"""``python -m runstream``: the command line."""

import sys

from runstream.cli import main

sys.exit(main())
