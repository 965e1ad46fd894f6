"""The `atlas` console script: the same command line as the `atlas` binary, run in this process."""

from __future__ import annotations

import signal
import sys

from . import _native


def main() -> None:
    # Ctrl-C ends the command as it ends the binary (Python's handler would wait for Rust to return).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli(sys.argv))


if __name__ == "__main__":
    main()
