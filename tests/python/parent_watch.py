"""Exit this process when the process that started it has gone.

The Rust harness stops its children by PID when a test ends, also on panic. If the test
process itself is killed (SIGKILL, a test runner's timeout), nothing runs in it any more, so
each helper watches its parent and exits on its own instead of lingering as an orphan.
"""

import os
import threading
import time

ENV_VAR = "BOOKING_HARNESS_PARENT_PID"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start() -> None:
    """Start a daemon thread that exits the process (status 0) once it is re-parented (its
    parent died) or once the test process named by BOOKING_HARNESS_PARENT_PID is gone."""
    parent = os.getppid()
    raw = os.environ.get(ENV_VAR, "")
    test_process = int(raw) if raw.isdigit() else None

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent or (test_process is not None and not _alive(test_process)):
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
