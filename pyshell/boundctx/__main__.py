import sys

from boundctx.cli import main

sys.exit(main())
