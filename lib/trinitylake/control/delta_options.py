"""Options for the control table's two clients: delta-rs (object_store's upper-case keys) and
`Storage` (s3fs-style lower-case keys), each made from whichever form the caller gave."""

from __future__ import annotations

from trinitylake.json_data import JsonObject


def delta_storage_options(scheme: str, fs_options: JsonObject) -> dict[str, str]:
    """delta-rs (object_store) options from the s3fs-style options of `Storage`."""
    if scheme != "s3":
        return {k: str(v) for k, v in fs_options.items() if k.isupper()}
    out: dict[str, str] = {}
    client_kwargs = fs_options.get("client_kwargs") or {}
    endpoint = fs_options.get("endpoint_url") or client_kwargs.get("endpoint_url")
    region = fs_options.get("region") or client_kwargs.get("region_name")
    pairs = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": fs_options.get("key"),
        "AWS_SECRET_ACCESS_KEY": fs_options.get("secret"),
        "AWS_SESSION_TOKEN": fs_options.get("token"),
        "AWS_REGION": region,
    }
    out.update({k: str(v) for k, v in pairs.items() if v})
    # Explicit delta-rs keys given by the caller win.
    out.update({k: str(v) for k, v in fs_options.items() if k.isupper()})
    out.setdefault("AWS_REGION", "us-east-1")
    if str(out.get("AWS_ENDPOINT_URL", "")).startswith("http://"):
        out.setdefault("AWS_ALLOW_HTTP", "true")
    # S3 supports If-None-Match: delta-rs commits with a conditional put, no lock service.
    out.setdefault("conditional_put", "etag")
    return out


def fs_options(options: JsonObject) -> JsonObject:
    """s3fs-style options (lower-case keys) from mixed options; AWS_* keys are translated."""
    out = {k: v for k, v in options.items() if not k.isupper()}
    upper = {k: v for k, v in options.items() if k.isupper()}
    for src, dst in (
        ("AWS_ENDPOINT_URL", "endpoint_url"),
        ("AWS_ACCESS_KEY_ID", "key"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_SESSION_TOKEN", "token"),
    ):
        if src in upper and dst not in out:
            out[dst] = upper[src]
    return out
