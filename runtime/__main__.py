"""``python -m raygent``: the ``raygent`` command line."""

import sys

from .cli import main

sys.exit(main())
