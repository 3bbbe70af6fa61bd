"""`python -m xlayer` and the `xlayer` command: signals handled first, then the command line imported and run."""
import sys


def run() -> int:
    """Run the command line with SIGINT and SIGTERM stopping it cleanly from the first instant; return the exit code.

    The handlers are installed before the command line's imports (polars, numpy: the first second or
    so), so an interrupt then is one line and exit 130 too, not a traceback.
    """
    from xlayer.signals import Stop, stop_on_signals

    stop_on_signals()
    try:
        from xlayer.cli.main import main

        return main()
    except (KeyboardInterrupt, Stop):
        print("xlayer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run())
