"""course_lib: the machine behind the pipeline-parallelism course.

Run ``python -m course_lib --help`` for the command line; the notebooks in ``notebooks/`` import
from here instead of redefining anything.
"""

__version__ = "0.1.0"
