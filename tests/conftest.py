"""pytest configuration shared by the tests in tests/."""

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long end-to-end test (real processes, a browser); it runs by default and in CI")
