import sys

from .cli.app import main

sys.exit(main())
