"""Processes a test run starts that die with it, without Python running in the child.

The kernel's parent-death signal used to be set by a `preexec_fn`. That makes subprocess fork()
and run Python between fork and exec, which its documentation calls unsafe with threads, and a
test process has them (grpcio's pollers among them): grpcio's fork handlers restarted a poller
in the child, the child's close_fds shut the descriptors it polled, and the child crashed before
exec (kube-controller-manager "exited with -6" once, and with it every real-node test). Without
`preexec_fn`, subprocess uses vfork, which runs no fork handlers, and util-linux's setpriv (in
every Debian, util-linux is essential) sets the signal and execs the command under the same pid.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence


def dying_with_parent(argv: Sequence[str]) -> list[str]:
    """`argv` run so that the kernel sends it SIGTERM when the thread that started it dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # never on Debian; the child then outlives a killed test run
        return list(argv)
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]
