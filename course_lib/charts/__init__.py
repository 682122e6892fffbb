"""One home for charts: the Gantt chart of a Timeline (``gantt``) and the curves and bars beside it
(``bubble_and_memory``). Charts only ever draw Timelines."""
