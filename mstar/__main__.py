import sys

from mstar.cli import main

sys.exit(main())
