"""`tlake catalog serve`: the lakehouse's Iceberg tables over the Iceberg REST protocol
(`trinitylake.rest_catalog`), for Spark, PyIceberg's RestCatalog, Trino, DuckDB."""

from __future__ import annotations

import click

from trinitylake.cli.common import Ctx, _kv, handle_errors


def register(cli: click.Group) -> None:
    @cli.group("catalog")
    def catalog() -> None:
        """Serve the lakehouse's Iceberg tables to Spark and other Iceberg REST clients."""

    @catalog.command("serve")
    @click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                  help="YAML settings (see conf/catalog_serve.yaml); options given here override it")
    @click.option("--host", default=None, help="interface to bind (default 127.0.0.1: this machine only)")
    @click.option("--port", type=int, default=None, help="port (default 8181)")
    @click.option("--token-file", default=None, help="file holding the bearer token (else TLAKE_CATALOG_TOKEN)")
    @click.option("--credential-file", default=None,
                  help="file of client_id:client_secret lines for the OAuth2 token endpoint (else TLAKE_CATALOG_CREDENTIAL)")
    @click.option("--read-only/--read-write", "read_only", default=None, help="refuse every write (403)")
    @click.option("--allow-purge/--keep-purged-files", "allow_purge", default=None,
                  help="a drop with purgeRequested deletes the table's files (default: kept, for time travel)")
    @click.option("--max-body-bytes", type=int, default=None, help="request body limit (default 8 MiB; 413 beyond)")
    @click.option("--token-lifetime", "token_lifetime_s", type=int, default=None,
                  help="seconds an issued OAuth2 token is valid (default 3600)")
    @click.option("--forwarded-allow-ips", default=None,
                  help="proxies whose X-Forwarded-* headers are trusted (behind a TLS proxy)")
    @click.option("--workers", type=int, default=1, show_default=True,
                  help="server processes on the one port (each groups its commits; they race for roots)")
    @click.option("--property", "properties", multiple=True,
                  help="catalog property key=value (PyIceberg FileIO settings of the tables' files, table-default.*)")
    @click.pass_obj
    @handle_errors
    def serve(ctx: Ctx, config_file: str | None, host: str | None, port: int | None, token_file: str | None,
              credential_file: str | None, read_only: bool | None, allow_purge: bool | None,
              max_body_bytes: int | None, token_lifetime_s: int | None, forwarded_allow_ips: str | None,
              properties: tuple[str, ...], workers: int) -> None:
        """Serve the Iceberg REST catalog protocol over the lakehouse (until Ctrl-C / SIGTERM).

        Every request needs `Authorization: Bearer <token>`: the token in TLAKE_CATALOG_TOKEN or
        --token-file, or one the server issued at /v1/oauth/tokens for client credentials.
        Time travel: the prefix version-N, as-of-TIME or export-NAME (ask /v1/config with
        warehouse=<prefix>) or ?version=N; it is read-only.
        """
        try:
            _serve(ctx, config_file, host, port, token_file, credential_file, read_only, allow_purge, max_body_bytes,
                   token_lifetime_s, forwarded_allow_ips, properties, workers)
        except KeyboardInterrupt:
            pass  # Ctrl-C while starting: a stop like any other (exit 0, no "Aborted!")


def _serve(ctx: Ctx, config_file: str | None, host: str | None, port: int | None, token_file: str | None,
           credential_file: str | None, read_only: bool | None, allow_purge: bool | None, max_body_bytes: int | None,
           token_lifetime_s: int | None, forwarded_allow_ips: str | None, properties: tuple[str, ...],
           workers: int = 1) -> None:
    # Starlette, uvicorn and PyIceberg's table models: about 1.2 s of imports (-X importtime) every other tlake command
    # would pay; only this command loads them.
    from trinitylake.rest_catalog import server

    given = server.ServeOptions(host=host, port=port, token_file=token_file, credential_file=credential_file,
                                read_only=read_only, allow_purge=allow_purge, max_body_bytes=max_body_bytes,
                                token_lifetime_s=token_lifetime_s, forwarded_allow_ips=forwarded_allow_ips,
                                properties=_kv(properties, "--property"))
    opts = server.merge(server.load_file(config_file), given) if config_file else given
    server.serve(ctx.require_uri(), opts, storage_options=ctx.storage_options, control_uri=ctx.control_uri,
                 audit=ctx.audit, workers=workers)
