"""Helpers for the test suite: program generators, differential runners, extras."""
