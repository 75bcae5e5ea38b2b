"""Run the pinned moto server for the tests, exiting when the test process goes away.

Usage (from the project's virtualenv): python moto_server.py -H 127.0.0.1 -p PORT
All arguments are passed unchanged to moto's own `moto_server` entry point.
"""

import sys

import parent_watch
from moto.server import main

if __name__ == "__main__":
    parent_watch.start()
    sys.exit(main(sys.argv[1:]))
