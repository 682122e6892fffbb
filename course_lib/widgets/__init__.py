"""Widgets: the dashboards for p, m and schedule, their "train for real" button, the latency map."""
