"""``python -m vilib_ros`` is ``vilib-ros``."""
import sys

from vilib_ros.cli import main

if __name__ == "__main__":
    sys.exit(main())
