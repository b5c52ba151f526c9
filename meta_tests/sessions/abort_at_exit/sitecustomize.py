"""Put on a launched rank's PYTHONPATH by teardown_abort_session.py: the rank named by
CONFORMANCE_ABORT_AT_EXIT_RANK aborts (SIGABRT) after every other exit handler has run,
as the native teardown abort ("terminate called without an active exception") does."""
import atexit
import os

if os.environ.get("RANK") is not None and os.environ.get("RANK") == os.environ.get("CONFORMANCE_ABORT_AT_EXIT_RANK"):
    atexit.register(os.abort)  # registered first, so it runs last
