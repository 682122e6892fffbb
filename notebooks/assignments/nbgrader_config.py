"""nbgrader configuration for the course's assignments (see README.md in this folder).

Run nbgrader commands from this folder: it is the course directory (source/, release/, submitted/,
autograded/, feedback/ and gradebook.db live here; everything except source/ is git-ignored).
"""

c = get_config()  # noqa: F821  (nbgrader provides get_config when it reads this file)

c.CourseDirectory.course_id = "pipeline-parallelism"
c.CourseDirectory.root = "."
# Where the assignments are: source/<assignment>/<notebook>.ipynb
c.CourseDirectory.source_directory = "source"
# Training the 80-layer model in assignment 2 takes seconds; give slow laptops plenty of room per cell.
c.Execute.timeout = 600
# Same kernel the lessons use; a student's notebook says "python3".
c.Execute.kernel_name = "python3"
