"""course_lib: the machine behind the pipeline-parallelism course.

Run ``python -m course_lib --help`` for the command line; the notebooks in ``notebooks/`` import
from here instead of redefining anything.

The library is built in floors; a module imports only from its own floor or the ones below
(tests/test_import_floors.py reads this picture and fails on an upward import or a circle)::

  6  lessons lesson exercises widgets grading cli __main__
  5  planner
  4  engines
  3  reference balance plots plot_gantt gantt_artists tp autoschedule
  2  costs links sim_inputs network netif geo timeline simulator model data devices partition launch
  2  launch_diagnosis
  2  saved_memory simulator_fast
  1  errors checks schedules

1 the schedule spine (schedules as data, messages, builders and registry, validator, PyTorch interop);
2 time and links (the simulator, the Timeline, the model, the data, the process launcher); 3 the
reference trainer, balancing, plots, tensor parallelism, schedules found by simulated search; 4 the
engines that really train; 5 the planner; 6 each lesson's glue, the widgets, the assignments' grading,
the command line.
"""

__version__ = "0.1.0"
