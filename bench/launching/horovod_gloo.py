"""Horovod's Gloo spawner: ``np`` Horovod ranks on this host, started the way horovodrun's Gloo path starts
them (its HTTP rendezvous server and host assignment) but watched by bench's own supervisor."""

from __future__ import annotations

from bench.launching import supervise


def spawn(mode: str, np: int, config_json: str, timeout_s: float) -> int:
    """Start ``np`` Horovod ranks on this host with the Gloo controller, watched by
    :func:`bench.launching.supervise.spawn`.

    The set-up horovodrun's Gloo path makes (its HTTP rendezvous server and host assignment), without
    horovodrun's own supervisor, so a failure is reported in one line and stops every rank.
    """
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousServer

    server = RendezvousServer()
    port = server.start()
    try:
        plan = get_host_assignments(parse_hosts(f"localhost:{np}"), np)
        server.init(plan)
        common = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                  "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": "lo",
                  "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(timeout_s))}
        envs = [dict(common, HOROVOD_HOSTNAME=s.hostname, HOROVOD_RANK=str(s.rank), HOROVOD_SIZE=str(s.size),
                     HOROVOD_LOCAL_RANK=str(s.local_rank), HOROVOD_LOCAL_SIZE=str(s.local_size),
                     HOROVOD_CROSS_RANK=str(s.cross_rank), HOROVOD_CROSS_SIZE=str(s.cross_size))
                for s in plan]
        return supervise.spawn([mode], envs, config_json)
    finally:
        server.stop()


