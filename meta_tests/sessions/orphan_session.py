"""Run by meta_tests/test_sessions.py: a test that leaves a launched process behind."""
import os
import subprocess


def test_leaves_an_orphan():
    env = dict(os.environ, CONFORMANCE_LAUNCH_ID="leaked-on-purpose")
    proc = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    print(f"ORPHAN_PID={proc.pid}")
