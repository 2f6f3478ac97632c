"""The cage student code runs in while grading (uid, limits, hidden paths), its kernel, uid leases, and
the worker that autogrades one student inside it.
"""
