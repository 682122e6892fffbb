"""The shelf: the pipeline machine a student reads beside the lessons (``python -m course_lib shelf``)."""
