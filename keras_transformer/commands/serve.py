"""Serves translation models over HTTP, with LibreTranslate's API and a page to try them.

    keras-transformer serve runs/ding                       # http://127.0.0.1:5000/
    keras-transformer serve exports/ding --runtime ctranslate2 --port 8080
    keras-transformer serve runs/opus-de-en runs/opus-en-fr  # de, en, fr; de -> fr via en
    curl -s 127.0.0.1:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "Guten Morgen! Wie geht es?", "source": "auto", "target": "en"}'

Each MODEL is a run folder (or an imported model), translated by the
Translator, or an export, translated by its SavedModel (the default),
CTranslate2, ONNX or LiteRT runtime (--runtime), each with its own runtime,
one model a language pair. The API is LibreTranslate's: POST /translate (q a
string or a list; format text or html; source auto to detect each text's
language; alternatives for the next best), POST /detect, POST
/translate_file (.txt, .html, .docx) and GET /download_file, GET
/languages, and GET /health, GET /metrics (Prometheus), GET / (the page). A
pair no model translates, but two do through English, goes through
English. Texts are split into sentences, HTML into the text of its blocks
with its markup kept (docs/serving-clients.md). Sentences of concurrent
requests are translated together, in each model's own queue: a batch takes
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
from keras_transformer.batch_defaults import share_cores

cli.use_tensorflow_backend()


INTERRUPTED = "the server stopped after answering the requests in flight"


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=cli.HelpFormatter)
    p.add_argument("models", metavar="MODEL", nargs="+",
                   help="a run folder, an imported model or an export; one a language pair")
    p.add_argument("--runtime", choices=runtimes.RUNTIMES,
                   help="every model's runtime (default: keras for a run folder; an export's "
                        "saved_model, else ctranslate2, else onnx, else litert)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=cli.non_negative_int, default=5000)
    p.add_argument("--api-keys", metavar="FILE",
                   help="keys, one a line; POST /translate then needs api_key")
    p.add_argument("--languages", metavar="SOURCE-TARGET", nargs="+",
                   help="each MODEL's language pair, in order (de-en; default: what each "
                        "folder says)")
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
                        help="batches (or searches of slots) translated at once")
    limits.add_argument("--slots", type=cli.non_negative_int, default=0,
                        help="continuous batching (the keras runtime): sentences a worker "
                             "searches at once, new ones joining as others end (default 0: "
                             "batches, faster on 2 cores so far)")
    limits.add_argument("--max-queue", type=cli.positive_int, default=1024,
                        help="sentences that may wait; beyond, 503 with Retry-After")
    limits.add_argument("--max-request-bytes", type=cli.positive_int, default=262144,
                        help="the largest request body; beyond, 413")
    limits.add_argument("--max-file-bytes", type=cli.positive_int, default=8 * 2**20,
                        help="the largest file POST /translate_file takes")
    limits.add_argument("--files-dir",
                        help="where translated files wait to be downloaded (default: a "
                             "temporary folder)")
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


def language_pairs(parser, args):
    """Each model's `(source, target)`: `--languages`, else its folder's."""
    if args.languages and len(args.languages) != len(args.models):
        parser.error(f"--languages gives {len(args.languages)} pair(s) for {len(args.models)} "
                     "MODEL(s); give one SOURCE-TARGET a model, in order")
    pairs = []
    for index, model in enumerate(args.models):
        if args.languages:
            source, _, target = args.languages[index].lower().partition("-")
            if not source or not target:
                parser.error(f"--languages {args.languages[index]!r}: write a pair as "
                             "SOURCE-TARGET, such as de-en")
            pairs.append((source, target))
            continue
        pair = run_folder.languages(model)
        if not pair or not all(pair):
            raise ValueError(f"{model} does not say which languages it translates; give "
                             "--languages (codes such as de-en, one a MODEL).")
        pairs.append(tuple(pair))
    if len(set(pairs)) < len(pairs):
        raise ValueError(f"Two models translate the same pair ({pairs}); serve one a pair.")
    return pairs


def main():
    p = parser()
    args = p.parse_args()
    keys = read_api_keys(args.api_keys) if args.api_keys else None
    decoding = runtimes.Decoding(args.beam_size, args.alpha, args.decode_margin)
    chosen = []
    for model in args.models:
        runtime_name = args.runtime or runtimes.default_runtime(model)
        runtimes.check_runtime(model, runtime_name, decoding)
        chosen.append(runtime_name)
    pairs = language_pairs(p, args)
    if not check_address(args.host, args.port) and keys is None:
        cli.warn(f"listening on {args.host}, which other machines may reach, without "
                 "--api-keys: anyone who reaches it can use the model.")
    try:  # the serve extra's packages, imported where missing ones get their one line
        import uvicorn

        from keras_transformer.serving import ServedModel, Settings, create_app
    except ImportError as error:
        raise ImportError(f"serve needs {error.name}: pip install "
                          "\"keras-transformer[serve]\"") from None
    share_cores(args.workers * len(args.models))
    models = []
    for model, runtime_name, (source, target) in zip(args.models, chosen, pairs):
        runtime = runtimes.open_runtime(model, runtime_name, decoding, args.threads, in_flight=1,
                                        slots=args.slots or None)
        runtime.translate(["."])  # traces the search before the first request
        models.append(ServedModel(runtime, source, target))
    if len({model.name for model in models}) < len(models):  # two folders of one name
        for index, model in enumerate(models):
            model.name = f"{model.name}-{index + 1}"
    settings = Settings(
        models, api_keys=keys, max_request_bytes=args.max_request_bytes,
        max_file_bytes=args.max_file_bytes, max_queue=args.max_queue,
        batch_tokens=args.batch_tokens, max_wait=args.max_wait_ms / 1000, workers=args.workers,
        files_dir=args.files_dir)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    served = ", ".join(f"{model.name} ({model.runtime.name} runtime, {model.source} -> "
                       f"{model.target})" for model in models)
    print(f"Serving {served} on http://{shown}:{args.port}/", flush=True)
    # uvicorn stops gracefully on SIGTERM (no new connections, the requests in
    # flight answered), then raises the signal again with the handler it
    # found: a quiet one makes that the end of a clean exit, status 0.
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    uvicorn.Server(uvicorn.Config(create_app(settings), host=args.host, port=args.port,
                                  access_log=args.access_log, log_level="info")).run()
