"""course_lib: the machine behind the pipeline-parallelism course.

Run ``python -m course_lib --help`` for the command line; the notebooks in ``notebooks/`` import
from here instead of redefining anything.

The library is built in floors; a module imports only from its own floor or the ones below
(tests/test_import_floors.py reads this picture and fails on an upward import or a circle)::

  6  lessons lesson exercises widgets cli __main__
  5  planner
  4  engines
  3  balance charts tp autoschedule
  2  schedules network fast_simulator stage_layout input_files output_files forkserver_folder
  1  shelf moved_modules

1 the shelf: the pipeline machine a student reads beside the lessons (``python -m course_lib shelf``): the
schedule IR and its one rule for dependencies and messages, the first schedules and the registry, the
validator, the simulator, the timeline, the model, the reference trainer, a stage's runtime, the local
engine, the distributed engine's rank loop, the launcher; and where moved modules went (``moved_modules``:
importing an old path names its new home); 2 more schedules, the network (sites, distances, link presets),
Megatron-style layout strings, the file door's checks, files written whole and the forkserver's folder
removed when it ends; 3 balancing, charts (the Gantt chart included), tensor parallelism, schedules found
by simulated search; 4 the engines' rooms (torch interop, stale weights, the split backward, injected
links); 5 the planner; 6 each lesson's glue, the widgets, the command line.
"""

from course_lib import moved_modules

__version__ = "0.1.0"

moved_modules.install()  # a lesson kept from before: its old imports name their new homes
