"""gputop: GPU_UTIL against the signals of real work, and the host side that starves it."""

__version__ = "0.1.0"
