"""`python -m programs.cli ...` is the `dsp` command."""

import sys

from programs.cli import main

sys.exit(main())
