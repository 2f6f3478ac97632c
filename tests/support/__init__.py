"""Helpers shared by the test-suites (tests/ and autograde_tests/): notebook execution and friends."""
