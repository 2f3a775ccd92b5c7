"""The one place mcpx's version is written down."""

__version__ = "0.1.0"
