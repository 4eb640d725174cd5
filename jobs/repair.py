"""spark-submit entry point of storelib.cli.repair (its --help says what it does)."""
import os
import sys

# The checkout's storelib; jobs/ leaves sys.path (jobs/inspect.py would shadow the stdlib module).
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from storelib.cli.repair import main  # noqa: E402
from storelib.cli.common import exit_now  # noqa: E402

if __name__ == "__main__":
    exit_now(main())     # the process ends once main returns (storelib.runtime.fastexit)
