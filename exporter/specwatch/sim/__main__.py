import sys

from specwatch.sim.cli import main

sys.exit(main())
