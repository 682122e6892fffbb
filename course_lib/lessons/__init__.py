"""Lesson glue: the runs, comparisons and planning problems that serve one lesson each."""
