"""`python -m xlayer` and the `xlayer` command: signals handled first, then the command line imported and run."""
import os
import sys


def run() -> int:
    """Run the command line with SIGINT and SIGTERM stopping it cleanly from the first instant; return the exit code.

    The handlers are installed before the command line's imports (polars, numpy: the first second or
    so), so an interrupt then is one line and exit 130 too, not a traceback.  With XLAYER_READY_FILE
    set, that file is created once they are: what a supervisor waits for before it may signal.
    """
    from xlayer.signals import stop_on_signals, stopped

    stop_on_signals()
    try:
        # a supervisor (or a test) that must not signal before the handlers are in place waits for this
        ready = os.environ.get("XLAYER_READY_FILE")
        if ready:
            open(ready, "a").close()
        from xlayer.cli.main import main

        return main()
    except BaseException as exc:
        if not stopped(exc):
            raise
        print("xlayer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run())
