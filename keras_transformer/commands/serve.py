"""Serves a model over HTTP: LibreTranslate's API, a page to try it, batches
shared by concurrent requests.

    keras-transformer serve runs/ding                       # http://127.0.0.1:5000/
    keras-transformer serve exports/ding --runtime ctranslate2 --port 8080
    curl -s 127.0.0.1:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "Guten Morgen!", "source": "de", "target": "en"}'

MODEL is a run folder (or an imported model), translated by the
Translator, or an export, translated by its SavedModel (the default),
CTranslate2 or ONNX runtime (--runtime). The API is LibreTranslate's: POST
/translate (q a string or a list; alternatives for the next best), GET
/languages, and GET /health, GET /metrics (Prometheus), GET / (the page).
Sentences of concurrent requests are translated together: a batch takes
what is waiting, up to --batch-tokens, at once on an idle server, else once
it holds its share of the work in hand or its first sentence has waited
--max-wait-ms; --max-queue sentences may wait, and requests beyond get 503
with Retry-After. It listens on 127.0.0.1 unless told otherwise (--host);
--api-keys FILE (one key a line) makes every translation request carry one.
SIGTERM or Ctrl-C: it stops accepting connections, answers the requests in
flight and exits, with status 0 after SIGTERM (130 after Ctrl-C). Needs
the serve extra: pip install "keras-transformer[serve]".
"""

import argparse
import ipaddress
import signal
import socket

from keras_transformer import cli, run_folder, runtimes
from keras_transformer.batch_defaults import default_batch_tokens, share_cores

cli.use_tensorflow_backend()


INTERRUPTED = "the server stopped after answering the requests in flight"


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=cli.HelpFormatter)
    p.add_argument("model", metavar="MODEL", help="a run folder, an imported model or an export")
    p.add_argument("--runtime", choices=runtimes.RUNTIMES,
                   help="default: keras for a run folder; an export's saved_model, else "
                        "ctranslate2, else onnx")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=cli.non_negative_int, default=5000)
    p.add_argument("--api-keys", metavar="FILE",
                   help="keys, one a line; POST /translate then needs api_key")
    p.add_argument("--source-language", help="the model's source language code (default: "
                                             "what its folder says)")
    p.add_argument("--target-language", help="the model's target language code")
    decoding = p.add_argument_group("decoding")
    cli.add_search_arguments(decoding, "beam width; a request's alternatives go up to it less "
                                       "one")
    decoding.add_argument("--threads", type=cli.positive_int,
                          help="CPU threads of a CTranslate2, ONNX or LiteRT model")
    limits = p.add_argument_group("batching and limits")
    limits.add_argument("--batch-tokens", type=cli.positive_int,
                        help="source tokens a batch holds at most (default: 2048 for beam "
                             "search, 4096 for greedy)")
    limits.add_argument("--max-wait-ms", type=cli.non_negative_float, default=30.0,
                        help="how long a batch's first sentence may wait for others (an idle "
                             "server starts at once)")
    limits.add_argument("--workers", type=cli.positive_int, default=2,
                        help="batches translated at once")
    limits.add_argument("--max-queue", type=cli.positive_int, default=1024,
                        help="sentences that may wait; beyond, 503 with Retry-After")
    limits.add_argument("--max-request-bytes", type=cli.positive_int, default=262144,
                        help="the largest request body; beyond, 413")
    p.add_argument("--access-log", action="store_true", help="log every request")
    cli.add_verbose_argument(p)
    return p


def read_api_keys(path):
    """The keys in `path`, one a line (blank lines and surrounding spaces
    ignored)."""
    try:
        with open(path, encoding="utf-8") as file:
            keys = {line.strip() for line in file if line.strip()}
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"Cannot read --api-keys {path}: {error}") from None
    if not keys:
        raise ValueError(f"--api-keys {path} holds no key; write one key a line.")
    return keys


def check_address(host, port):
    """Raises a one-line error if `host:port` cannot be listened on; warns
    when it is reachable from other machines."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        raise ValueError(f"Cannot listen on {host}:{port} ({error.strerror or error}); choose "
                         "another --port or --host.") from None
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return host == "localhost"


def main():
    p = parser()
    args = p.parse_args()
    keys = read_api_keys(args.api_keys) if args.api_keys else None
    decoding = runtimes.Decoding(args.beam_size, args.alpha, args.decode_margin)
    runtime_name = args.runtime or runtimes.default_runtime(args.model)
    runtimes.check_runtime(args.model, runtime_name, decoding)
    pair = (args.source_language, args.target_language)
    if not all(pair):
        known = run_folder.languages(args.model) or (None, None)
        pair = tuple(given or found for given, found in zip(pair, known))
    if not all(pair):
        raise ValueError(f"{args.model} does not say which languages it translates; give "
                         "--source-language and --target-language (codes such as de and en).")
    if not check_address(args.host, args.port) and keys is None:
        cli.warn(f"listening on {args.host}, which other machines may reach, without "
                 "--api-keys: anyone who reaches it can use the model.")
    try:  # the serve extra's packages, imported where missing ones get their one line
        import uvicorn

        from keras_transformer.serving import Settings, create_app
    except ImportError as error:
        raise ImportError(f"serve needs {error.name}: pip install "
                          "\"keras-transformer[serve]\"") from None
    share_cores(args.workers)
    runtime = runtimes.open_runtime(args.model, runtime_name, decoding, args.threads,
                                    in_flight=1)
    runtime.translate(["."])  # traces the search before the first request
    settings = Settings(
        runtime, *pair, api_keys=keys, max_request_bytes=args.max_request_bytes,
        max_queue=args.max_queue,
        batch_tokens=args.batch_tokens or default_batch_tokens(runtime.decoding.beam_size),
        max_wait=args.max_wait_ms / 1000, workers=args.workers)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"Serving {args.model} ({runtime.name} runtime, {pair[0]} -> {pair[1]}) on "
          f"http://{shown}:{args.port}/", flush=True)
    # uvicorn stops gracefully on SIGTERM (no new connections, the requests in
    # flight answered), then raises the signal again with the handler it
    # found: a quiet one makes that the end of a clean exit, status 0.
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    uvicorn.Server(uvicorn.Config(create_app(settings), host=args.host, port=args.port,
                                  access_log=args.access_log, log_level="info")).run()
