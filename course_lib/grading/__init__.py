"""Checks the exercises share: visible-test helpers and the pieces the grading run uses."""
