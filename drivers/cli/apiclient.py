"""The API client of the commands that talk to the cluster (`serve`, `check`, `explain`), and
the one line they print when it cannot be made or a read fails.

A module of its own so that `check --watch` (a small DaemonSet process) and `explain` make the
client without importing `serve`, which brings grpc and the plugin runtime along.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from topodra.common.kubeapi import loader
from topodra.common.kubeapi.errors import ApiError


def kubeconfig_problem(path: str) -> str | None:
    """Why `path` is not a kubeconfig, in words, before the client's loader sees it (its own
    errors for a file that is not a YAML mapping are Python's: 'str' object does not support
    item assignment)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError) as e:
        return f"kubeconfig {path}: cannot read it: {e}"
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return f"kubeconfig {path} is not YAML{where}"
    if not isinstance(doc, dict):
        return f"kubeconfig {path} is not a kubeconfig: expected a YAML mapping with clusters and contexts"
    missing = [k for k in ("clusters", "contexts") if not isinstance(doc.get(k), list) or not doc.get(k)]
    if missing:
        return f"kubeconfig {path} is not a kubeconfig: it has no {' and no '.join(missing)}"
    return None


def default_kubeconfig(flag: str | None) -> str | None:
    """The kubeconfig a command run by a person reads, as kubectl finds it: --kubeconfig, else
    the first file of $KUBECONFIG that exists (kubectl would merge them; we read one), else
    ~/.kube/config when there is one; None: the in-cluster service account (a pod has none of
    these). `serve` does not use this: a driver reads what its DaemonSet gives it, nothing else."""
    if flag:
        return flag
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    for path in listed:
        if os.path.isfile(path):
            return path
    if listed:
        return listed[0]  # none exists: the error names the first
    home = os.path.expanduser(os.path.join("~", ".kube", "config"))
    return home if os.path.isfile(home) else None


def api_client(kubeconfig: str | None) -> Any:
    """The official client from `kubeconfig`, else the in-cluster service account. A
    kubeconfig that cannot be read or used is a ValueError naming it; anything else (our own
    bug, a missing module) is not caught here and fails loudly."""
    if kubeconfig and (problem := kubeconfig_problem(kubeconfig)) is not None:
        raise ValueError(problem)
    try:
        return loader.new_api_client(kubeconfig)
    except Exception as e:
        if not _config_problem(e):
            raise
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config (no --kubeconfig given)"
        raise ValueError(f"{where}: {e}") from e


def client_as_kubectl(flag: str | None) -> Any:
    """The client of a command run by a person (`check`, `explain`): from the kubeconfig
    kubectl would read (default_kubeconfig), else the in-cluster account; ValueError with one
    sentence when none works."""
    return api_client(default_kubeconfig(flag))


def _config_problem(e: Exception) -> bool:
    """Errors of reading or using a kubeconfig / the service account. The kubernetes package is
    imported only now (loader.load() keeps its kubeconfig half out of an in-cluster driver), and
    yaml only if a kubeconfig was read."""
    from kubernetes.config.config_exception import ConfigException

    yaml = sys.modules.get("yaml")
    return isinstance(e, (OSError, ValueError, ConfigException)) or (
        yaml is not None and isinstance(e, yaml.YAMLError)
    )


def say(err: ApiError) -> str:
    """An API read's failure as one line: no answer at all is said as such (the client's own
    words for it span lines and repeat the URL)."""
    if err.status is None:
        return f"{err.verb}: the API server cannot be reached: {_one_line(err.reason)}"
    return _one_line(str(err))


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
