"""The test suite runs with shardc's debug checks on: every traced program is verified."""
import os

os.environ.setdefault("SHARDC_CHECKS", "1")
