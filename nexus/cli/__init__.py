"""The ``nexus`` command line (``nexus.cli.main:main``)."""
