#!/usr/bin/env python
"""Django's command-line utility for the Paperclip Console."""

import os
import signal
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paperclip_console.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except KeyboardInterrupt:
        # Ctrl-C (bin/run's setup, a long command): stop quietly, with the
        # shell's status for an interrupt, not a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # nor one while shutting down
        sys.exit(130)
    # A Ctrl-C that lands while the interpreter shuts down would print from a
    # finalizer ("Exception ignored in …"); the command is done, so ignore it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    main()
