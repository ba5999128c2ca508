"""Errors that reach the user as one line, never a traceback."""


class UsageError(Exception):
    """Bad input (arguments, files): reported as one line on stderr, exit status 2."""
