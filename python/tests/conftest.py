"""The package under test is the build's: PYTHONPATH=build/release/python (scripts/test.sh)."""
