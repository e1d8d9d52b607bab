import sys

from vilib_ros.cli import main

sys.exit(main())
