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

__all__ = ["sigterm_as_interrupt", "stop_children"]


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


def stop_children(grace_s: float = 1.0) -> list[int]:
    """Terminate every descendant process of this one (simulator, compiler, build tools).

    SIGTERM first, SIGKILL to whatever is still alive after ``grace_s`` seconds; returns
    the pids that were signalled.  Used when a Ctrl-C arrives while a simulator is being
    built or started and cannot be reached through the stop file, so that ``mrcnic``
    never leaves a simulator running.
    """
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    for p in kids:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(kids, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return [p.pid for p in kids]
