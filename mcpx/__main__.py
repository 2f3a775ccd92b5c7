"""``python -m mcpx`` runs the same click CLI as the ``mcpx`` script."""

from mcpx.cli.main import main

if __name__ == "__main__":
    main()
