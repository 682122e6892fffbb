"""Helpers the tests share (none of them a test): each test file imports what it needs from here,
never from another test file. ``tests/`` is on sys.path because pytest puts the folder of the
root ``conftest.py`` there."""
