"""`python -m agent ...` is the same as `waterline ...`."""

import sys

from agent.cli import main

sys.exit(main())
