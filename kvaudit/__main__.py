"""`python -m kvaudit` is the same as the `kvaudit` console script."""

from kvaudit.cli import main

if __name__ == "__main__":
    main()
