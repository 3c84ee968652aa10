from airflow_conduit.runs.handles import backend_of


def test_a_handle_names_its_backend():
    assert backend_of({"run_id": "p-s01", "backend": "standalone"}) == "standalone"


def test_a_handle_persisted_with_the_old_key_still_names_its_backend():
    """Task state, XCom and deferred triggers keep handles across an upgrade."""
    assert backend_of({"run_id": "p-s01", "launcher": "local"}) == "local"


def test_no_handle_has_no_backend():
    assert backend_of(None) is None
    assert backend_of({}) is None
