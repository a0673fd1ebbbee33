"""SIGTERM handled like Ctrl-C, so that long runs stop their child processes.

``mrcnic sim`` and ``mrcnic build`` run Icarus / the YoWASP tools as child processes
(``subprocess.run``).  A SIGTERM to the ``mrcnic`` process alone would end it and leave the
child running; inside :func:`sigterm_as_interrupt` SIGTERM raises ``KeyboardInterrupt``
instead, which ``subprocess.run`` answers by killing its child before re-raising, and
the command's own Ctrl-C handling (a report written, a clear message) applies.
"""

import contextlib
import signal
import threading

__all__ = ["sigterm_as_interrupt"]


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While active, SIGTERM raises ``KeyboardInterrupt`` in the main thread.

    Outside the main thread (where Python cannot install signal handlers) it does
    nothing.  The previous handler is restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
