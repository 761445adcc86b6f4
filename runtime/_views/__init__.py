"""Reading plans back: their statuses and timelines, the plan graph as a picture, the HTML
report, JUnit and SARIF reports, and replay of a plan from its events.

Imports :mod:`.._lifecycle` and everything below it. Independent of :mod:`.._embed`.
"""
