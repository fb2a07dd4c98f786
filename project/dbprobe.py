"""Exit 0 when the PostgreSQL server named by a database URL answers, else 1 (used by `make test`)."""

from __future__ import annotations

import sys

import psycopg


def postgres_reachable(url: str) -> bool:
    # Connect to the maintenance database: the test run creates its own `test_*` database.
    try:
        psycopg.connect(url, dbname="postgres", connect_timeout=3).close()
    except psycopg.Error:
        return False
    return True


if __name__ == "__main__":
    sys.exit(0 if postgres_reachable(sys.argv[1]) else 1)
