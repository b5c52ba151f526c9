"""Secrets never leave the machine: environment values are dropped for secret-like names.

A name is secret-like when it names a credential: AWS keys and session tokens, Hugging Face
tokens, or anything containing TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL or AUTH.
The name is kept (a reader sees that it was set); the value is replaced.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|KEY|CREDENTIAL|AUTH|COOKIE|SESSION_?ID|PRIVATE)", re.I
)
# Names that look secret-like but carry no secret, and that a repro needs.
_ALLOWED = {"CONFORMANCE_SESSION_ID", "PYTHONHASHSEED"}


def is_secret_name(name: str) -> bool:
    return name not in _ALLOWED and bool(_SECRET_NAME.search(name))


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in sorted(env.items())}


def scrub_text(text: str, env: dict[str, str]) -> str:
    """Remove the values of secret-like variables wherever they appear in ``text``."""
    from xml.sax.saxutils import escape

    for name, value in env.items():
        if is_secret_name(name) and value and len(value) >= 4:
            text = text.replace(value, REDACTED).replace(escape(value), REDACTED)
    return text
