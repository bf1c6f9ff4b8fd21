import os
import pathlib

import pytest

import apiary

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def con():
    connection = apiary.connect()
    yield connection
    connection.close()


def pytest_sessionstart(session):
    # Under `cargo test` (python/tests/pytest.rs) the package must be the build under
    # test, not one installed in the virtual environment.
    expected = os.environ.get("APIARY_EXPECT_MODULE")
    if expected:
        actual = pathlib.Path(apiary._apiary.__file__).resolve()
        assert actual == pathlib.Path(expected).resolve(), f"testing {actual}, not {expected}"
