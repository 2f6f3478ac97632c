"""What every process starter in course_lib shares, kept free of torch where it can be: reaping and
exec (``processes``, the grader's sandbox uses it before it execs a kernel), plain-data transport between
processes that must not trust each other (``plain``), reading a hung rank's stack dump (``stacks``), the
backend and device a rank computes on (``backend``), and whether a lesson runs for the grader
(``graded_run``). Imports nothing else of ``course_lib.real``.
"""
