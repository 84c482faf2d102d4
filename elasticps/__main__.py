import sys

from elasticps.cli import main

sys.exit(main())
