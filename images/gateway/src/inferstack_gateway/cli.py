"""`inferstack-gateway --config FILE`: validate the config and serve it with uvicorn (uvloop + httptools)."""

from __future__ import annotations

import argparse
import gc
import ssl
import sys
from typing import Any

from inferstack_gateway.config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferstack-gateway", description=__doc__)
    parser.add_argument("--config", required=True, help="gateway YAML config (see config.example.yaml)")
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        # Imported after validation: a config error should print fast and without the server's import cost.
        from inferstack_gateway.app import Gateway

        app = Gateway(config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        models, upstreams = len(config.models), len(config.upstreams)
        print(f"{args.config}: ok ({models} model{'s' * (models != 1)}, {upstreams} upstream{'s' * (upstreams != 1)})")
        return 0

    tls: dict[str, Any] = {}
    if config.server.tls_cert_file is not None and config.server.tls_key_file is not None:
        cert, key = config.server.tls_cert_file, config.server.tls_key_file
        try:  # what uvicorn would load, checked first: a missing or mismatched file is one line, not a traceback
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            print(
                f"server.tls_cert_file / server.tls_key_file: cannot load {cert} and {key}: "
                f"{getattr(exc, 'strerror', None) or exc}. Fix: mount the kubernetes.io/tls Secret there "
                "(tls.crt, tls.key), a PEM certificate chain and its private key",
                file=sys.stderr,
            )
            return 2
        tls = {"ssl_certfile": cert, "ssl_keyfile": key}

    import uvicorn

    from inferstack_gateway import logs
    from inferstack_gateway.server import http_protocol

    logs.configure(config.server.log_level)
    # Everything allocated so far (modules, config, the app, its metrics) lives as long as the process: keep it out of
    # the cyclic collector's generations, so that collections under load only scan per-request objects.
    gc.collect()
    gc.freeze()
    uvicorn.run(
        app,
        host=config.server.host,
        port=config.server.port,
        loop="uvloop",
        # uvicorn's httptools protocol: a response head leaves with its first bytes; a request's head has a deadline
        # uvicorn calls `http` to build each connection's protocol: a factory serves as well as the class it types
        http=http_protocol(config.server),  # type: ignore[arg-type]
        ws="none",
        lifespan="on",
        access_log=False,  # the gateway writes its own structured access log
        log_config=None,
        server_header=False,
        timeout_keep_alive=config.server.keepalive_s,
        proxy_headers=False,  # the gateway reads no client address: skip uvicorn's per-request X-Forwarded-* pass
        timeout_graceful_shutdown=30,
        **tls,  # uvicorn's context: TLS 1.2 and 1.3 (Python's default minimum for a server context)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
