import sys

from workbench.commands.main import main

sys.exit(main())
