#!/usr/bin/env python
"""Django's command-line utility for the Paperclip Console."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paperclip_console.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except KeyboardInterrupt:
        # Ctrl-C (bin/run's setup, a long command): stop quietly, with the
        # shell's status for an interrupt, not a traceback.
        sys.exit(130)


if __name__ == "__main__":
    main()
