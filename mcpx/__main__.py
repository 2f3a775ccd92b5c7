"""``python -m mcpx`` runs the same entry point as the ``mcpx`` script."""

from mcpx.cli.quick import main

if __name__ == "__main__":
    main()
