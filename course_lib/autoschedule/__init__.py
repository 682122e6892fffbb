"""Schedules found by search instead of drawn by hand: the Zero Bubble paper's automatic scheduler under a
memory limit (``auto_zero_bubble.py``, its heuristic in ``heuristic.py``), and an exact search for tiny sizes
(``exact.py``) that says how far the heuristic is from the best order.

It stands a floor above the schedule spine because it judges a candidate by simulating it (``scoring.py``
calls ``course_lib.shelf.simulator``).
The registry's ``zb-1p`` and ``zb-2p`` are what it returns at equal costs
and free links (``schedules/zero_bubble.py``; a test holds the two equal); for your own costs call
``auto_zero_bubble``.
"""
