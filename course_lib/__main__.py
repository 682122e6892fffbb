"""``python -m course_lib ...``: see course_lib/cli/__init__.py."""

from course_lib.cli import main

raise SystemExit(main())
