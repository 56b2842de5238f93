import sys

from rl_suite.cli import main

sys.exit(main())
