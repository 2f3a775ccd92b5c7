"""mcpx: a Model Context Protocol gateway daemon on Twisted."""

from mcpx._version import __version__

__all__ = ["__version__"]
