"""The test harness itself: what every black-box test relies on to start its server."""

import socket

import requests
from server_harness import HOST, NaiadServer, make_repository


def test_a_port_taken_before_the_server_binds_it_is_replaced(tmp_path):
    # What pytest-xdist runs hit: a port picked free is taken by another process before
    # the server binds it, and the server exits on "address already in use".
    server = NaiadServer(make_repository(tmp_path / "models", ["add_sub"]), log_dir=tmp_path)
    taken_port = server.http_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind((HOST, taken_port))
        squatter.listen()
        with server:
            assert server.http_port != taken_port
            assert requests.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200
    first_log = tmp_path / f"naiad-{taken_port}.stderr.log"
    assert "address already in use" in first_log.read_text().lower()
