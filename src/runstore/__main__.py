"""``python -m runstore``: the same as the ``runstore`` command."""

from runstore.cli import main

if __name__ == "__main__":
    main()
