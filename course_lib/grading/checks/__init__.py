"""Each chapter's visible checks, ``chNN_<exercise>.py``: what the notebooks import below an answer cell.

The hidden checks that grade the same exercises live with the instructor, never in course_lib.
"""
