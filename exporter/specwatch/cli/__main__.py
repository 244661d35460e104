import sys

from specwatch.cli.main import main

sys.exit(main())
