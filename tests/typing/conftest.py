"""The files here are read by mypy (tests/test_static_types.py), never imported: one of them holds mistakes."""

collect_ignore = ["user_code.py", "user_errors.py"]
