"""Client-side checks of a queue ``--output`` (run by the component before anything launches).

With a queue URL as ``--output``: ``--state DIR_OR_URL`` is required (the job's unit commit
records, lease and ``_SUCCESS`` manifest live there), the URL is parsed and its client library
imported, the broker must answer (unless ``--dryrun``), and an inline password moves to a 0600
file (``?password_file=``), as for ``--cache``: it never reaches the command line, a dry run or
a log. Returns the directory the job commits to (``--state``, or ``--output`` for files).
"""

import os
from typing import Any, Dict

from torchx_datapipes.options.spec import OptionError
from torchx_datapipes.queue.registry import broker_class, is_queue_url, open_queue, parse
from torchx_datapipes.secrets import mask_url, public_url


def prepare_output(values: Dict[str, Any], shares_client_fs: bool, dryrun: bool, store: str) -> str:
    """Check the queue options in ``values`` (updated in place) and return the commit directory."""
    output, state = values["output"], values.get("state")
    if not is_queue_url(output):
        if state:
            raise OptionError(
                f"transform: --state {state} applies to a queue --output (redis://, amqp://, nats://) only;"
                f" --output {mask_url(output)} is a directory that holds its own _SUCCESS: drop --state"
            )
        return str(output)
    if not state:
        raise OptionError(
            f"transform: --output {mask_url(output)} is a queue, so --state DIR_OR_URL is required: it holds"
            " the job's unit commit records, lease and _SUCCESS manifest, which make a relaunch or a torchrun"
            " restart resume without publishing a committed unit twice (e.g. --state ./state/train or"
            " s3://bucket/state/train)"
        )
    spec = parse(output)
    broker_class(spec.scheme)  # ImportError with the extra to install
    if "://" not in state and not os.path.isabs(state):
        if not shares_client_fs:
            raise OptionError(
                f"--state {state!r} is relative to this machine's working directory, which the job cannot"
                " see: pass a URL every node can reach (s3://...) or an absolute path every node mounts"
            )
        state = values["state"] = os.path.abspath(os.path.expanduser(state))
    if not dryrun:
        with open_queue(output) as broker:
            broker.ping()  # QueueUnavailableError: the URL (password hidden) and the fix
    try:
        values["output"] = public_url(output, store)
    except ValueError as e:
        raise OptionError(str(e).replace("--cache", "--output")) from e
    return str(state)
