"""Serves translation models over HTTP, with LibreTranslate's and DeepL's APIs and a page to try them.

    keras-transformer serve runs/ding                       # http://127.0.0.1:5000/
    keras-transformer serve exports/ding --runtime ctranslate2 --port 8080
    keras-transformer serve runs/opus-de-en runs/opus-en-fr  # de, en, fr; de -> fr via en
    curl -s 127.0.0.1:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "Guten Morgen! Wie geht es?", "source": "auto", "target": "en"}'

Each MODEL is a run folder (or an imported model), translated by the
Translator, or an export, translated by its SavedModel (the default),
CTranslate2, ONNX or LiteRT runtime (--runtime), each with its own runtime,
one model a language pair. The API is LibreTranslate's, as LibreTranslate
1.9.6 answers it (docs/serving-clients.md): POST /translate (q a string or
a list; format text or html; source auto to detect each text's language;
alternatives for the next best), POST /detect, POST /translate_file (.txt,
.html, .docx) and GET /download_file, GET /languages, GET
/frontend/settings, POST /suggest, GET /spec (OpenAPI), GET /health, and
GET /models, GET /metrics (Prometheus), GET / (the page), with CORS
headers on every answer. DeepL's API is served beside it under /v2 and
/v3 (translate, languages, usage, glossaries, documents; kept in
--state-dir, which replicas share), for DeepL's clients given the server's
URL; with --api-keys, each key's glossaries, documents and usage are its
own. A pair no model translates, but two do through English, goes through
English. Texts are split into sentences, HTML into
the text of its blocks with its markup kept. Sentences of concurrent
requests are translated together, in each model's own queue: a batch takes
what is waiting, up to --batch-tokens, at once on an idle server, else once
it holds its share of the work in hand or its first sentence has waited
--max-wait-ms; --max-queue sentences may wait, and requests beyond get 503
with Retry-After. LibreTranslate's limits go by its flag names
(--char-limit, --req-limit, --batch-limit, --alternatives-limit, --api-keys,
--suggestions, --disable-files-translation). It listens on 127.0.0.1 unless
told otherwise (--host); --api-keys FILE (a key a line) makes every
translation request carry one (--api-keys-optional: a key only lifts the
limits). SIGTERM or Ctrl-C: it stops accepting connections, answers the
requests in flight and exits, with status 0 after SIGTERM (130 after
Ctrl-C). Needs the serve extra: pip install "keras-transformer[serve]".
"""

import argparse
import ipaddress
import os
import signal
import socket

from keras_transformer import cli, run_folder, runtimes
from keras_transformer.glossary import Glossary
from keras_transformer.batch_defaults import decoding_kernels, share_cores

cli.use_tensorflow_backend()


INTERRUPTED = "the server stopped after answering the requests in flight"

KEEP_ALIVE = 75.0
"""Seconds an idle connection is kept for the client's next request
(`--keep-alive`; uvicorn's own default is 5). A server that closes a
connection just as its client sends the next request on it drops that
request: deepl-node polls a document every 5 s on connections it keeps
open, so a server closing them after 5 s idle drops its polls ("socket
hang up"). 75 s is nginx's default, longer than clients' polls and than
load balancers' idle timeouts (60 s)."""


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
    p.add_argument("--languages", metavar="SOURCE-TARGET", nargs="+",
                   help="each MODEL's language pair, in order (de-en; default: what each "
                        "folder says)")
    decoding = p.add_argument_group("decoding")
    cli.add_search_arguments(decoding, "beam width; a request's alternatives go up to it less "
                                       "one")
    cli.add_guard_argument(decoding)
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
    limits.add_argument("--max-query-bytes", type=cli.positive_int, default=65536,
                        help="the longest query string; beyond, 414")
    limits.add_argument("--files-dir",
                        help="where translated files wait to be downloaded (default: a "
                             "temporary folder)")
    limits.add_argument("--keep-alive", metavar="SECONDS", type=cli.positive_float,
                        default=KEEP_ALIVE,
                        help="how long an idle connection is kept open for the client's next "
                             "request (longer than a load balancer's idle timeout, and than "
                             "the 5 s between deepl-node's polls of a document)")
    limits.add_argument("--cors-origins", metavar="ORIGIN", nargs="+", default=["*"],
                        help="the origins whose pages may call the server (such as "
                             "https://example.org); * for any")
    libre = p.add_argument_group("LibreTranslate's options (-1: no limit)")
    libre.add_argument("--api-keys", metavar="FILE",
                       help="keys, one a line, each optionally with its own requests a "
                            "minute and characters a text: KEY [REQ_LIMIT [CHAR_LIMIT]]; "
                            "/translate, /detect and /translate_file then need api_key")
    libre.add_argument("--api-keys-optional", action="store_true",
                       help="with --api-keys: a request without a key is let in at the "
                            "server's limits (a wrong key is still refused), as "
                            "LibreTranslate's --api-keys; on DeepL's API, the requests "
                            "without a key keep their glossaries and documents apart")
    libre.add_argument("--char-limit", type=_limit, default=-1,
                       help="characters a text may hold")
    libre.add_argument("--req-limit", type=_limit, default=-1,
                       help="requests a minute per key, or per address without one (a list "
                            "of n texts counts n); beyond, 429")
    libre.add_argument("--batch-limit", type=_limit, default=-1,
                       help="texts a list q may hold")
    libre.add_argument("--alternatives-limit", type=_limit, default=-1,
                       help="alternatives a request may ask for")
    libre.add_argument("--suggestions", action="store_true",
                       help="store the suggestions POST /suggest takes (else it answers 403)")
    libre.add_argument("--suggestions-db", default=os.path.join("db", "suggestions.db"),
                       help="the SQLite file suggestions go to (LibreTranslate's)")
    libre.add_argument("--max-suggestions", type=cli.positive_int, default=10000,
                       help="suggestions stored at most; beyond, 403")
    libre.add_argument("--disable-files-translation", action="store_true",
                       help="POST /translate_file answers 403")
    libre.add_argument("--metrics", action="store_true",
                       help="/metrics also gives LibreTranslate's own metrics "
                            "(libretranslate_http_request_duration_seconds, "
                            "libretranslate_http_requests_in_flight), which its dashboards "
                            "read; ours are always served")
    libre.add_argument("--metrics-auth-token", metavar="TOKEN",
                       help="/metrics then needs Authorization: Bearer TOKEN")
    deepl = p.add_argument_group("DeepL's API (/v2, /v3)")
    deepl.add_argument("--state-dir", metavar="DIR",
                       help="where the glossaries, documents and usage of DeepL's clients are "
                            "kept (DIR/glossaries, DIR/documents, DIR/usage), across restarts "
                            "and shared by servers given the same folder: replicas (default: "
                            "a temporary folder)")
    deepl.add_argument("--glossaries-dir", metavar="DIR",
                       help="where the glossaries are kept instead of --state-dir's "
                            "glossaries, across restarts and shared by servers given the same "
                            "folder")
    deepl.add_argument("--max-glossaries", type=cli.positive_int, default=1000,
                       help="glossaries kept at most, of every key together")
    deepl.add_argument("--max-glossaries-per-key", type=cli.positive_int,
                       help="glossaries one key may keep, and the requests without a key "
                            "together (default: --max-glossaries shared evenly among the "
                            "keys of --api-keys, and the keyless with --api-keys-optional)")
    deepl.add_argument("--assign-glossaries", metavar="KEY",
                       help="with --api-keys: give the glossaries kept (--state-dir, "
                            "--glossaries-dir) that "
                            "have no owner (kept before glossaries belonged to keys, or by a "
                            "server without --api-keys) to KEY, one of the keys, at start "
                            "(else every key shares them)")
    deepl.add_argument("--char-quota", type=cli.positive_int,
                       help="characters a key may translate (counted in --state-dir, by "
                            "every server on it, since it was made); beyond, 456 (default: "
                            "no quota)")
    deepl.add_argument("--max-documents", type=cli.positive_int, default=32,
                       help="documents handed in and not yet fetched, of every server on "
                            "--state-dir; beyond, 429")
    p.add_argument("--glossary", metavar="NAME[:SOURCE-TARGET]=FILE", action="append",
                   default=[],
                   help="a glossary requests may name in their glossary field (a .tsv, .csv or "
                        ".tbx file, docs/glossaries.md), for the pair a model translates "
                        "(default: the one model's); repeatable")
    p.add_argument("--access-log", action="store_true", help="log every request")
    cli.add_verbose_argument(p)
    return p


def _limit(text):
    """argparse type: LibreTranslate's limits, a whole number >= 0 or -1
    (none)."""
    return -1 if text.strip() == "-1" else cli.non_negative_int(text)


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
    if args.api_keys_optional and not args.api_keys:
        p.error("--api-keys-optional goes with --api-keys FILE")
    if args.assign_glossaries is not None and not (args.api_keys and glossaries_folder(args)):
        p.error("--assign-glossaries goes with --api-keys FILE and --glossaries-dir DIR (or "
                "--state-dir DIR)")
    decoding = runtimes.Decoding(args.beam_size, args.alpha, args.decode_margin, guard=args.guard)
    chosen = []
    for model in args.models:
        runtime_name = args.runtime or runtimes.default_runtime(model)
        runtimes.check_runtime(model, runtime_name, decoding)
        chosen.append(runtime_name)
    pairs = language_pairs(p, args)
    glossaries = read_glossaries(p, args, pairs, chosen)
    if not check_address(args.host, args.port) and (args.api_keys is None
                                                    or args.api_keys_optional):
        cli.warn(f"listening on {args.host}, which other machines may reach, without "
                 "--api-keys: anyone who reaches it can use the model.")
    try:  # the serve extra's packages, imported where missing ones get their one line
        import uvicorn

        from keras_transformer.serving import ServedModel
        from keras_transformer.serving.limits import read_keys
    except ImportError as error:
        raise ImportError(f"serve needs {error.name}: pip install "
                          "\"keras-transformer[serve]\"") from None
    if args.api_keys:  # a mistake in the file, named before the models load
        if args.assign_glossaries not in (None, *read_keys(args.api_keys)):
            raise ValueError(f"--assign-glossaries: that key is not one of --api-keys "
                             f"{args.api_keys}.")
    for option, folder in (("--state-dir", args.state_dir),
                           ("--glossaries-dir", args.glossaries_dir)):
        if folder:
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as error:
                raise ValueError(f"Cannot use {option} {folder}: "
                                 f"{error.strerror or error}") from None
            if not os.access(folder, os.W_OK):
                raise ValueError(f"Cannot write to {option} {folder}.")
    if glossaries_folder(args):
        own_glossaries(args)
    share_cores(args.workers * len(args.models))
    decoding_kernels()
    models = []
    for model, runtime_name, (source, target) in zip(args.models, chosen, pairs):
        runtime = runtimes.open_runtime(model, runtime_name, decoding, args.threads, in_flight=1,
                                        slots=args.slots or None)
        runtime.translate(["."])  # traces the search before the first request
        runtime.search_lone_faster(args.threads)  # a lone request's faster search
        models.append(ServedModel(runtime, source, target))
    if len({model.name for model in models}) < len(models):  # two folders of one name
        for index, model in enumerate(models):
            model.name = f"{model.name}-{index + 1}"
    config = server_config(args, models, glossaries)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    served = ", ".join(f"{model.name} ({model.runtime.name} runtime, {model.source} -> "
                       f"{model.target})" for model in models)
    print(f"Serving {served} on http://{shown}:{args.port}/", flush=True)
    # uvicorn stops gracefully on SIGTERM (no new connections, the requests in
    # flight answered), then raises the signal again with the handler it
    # found: a quiet one makes that the end of a clean exit, status 0.
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    uvicorn.Server(config).run()


def glossaries_folder(args):
    """Where DeepL's API keeps its glossaries: --glossaries-dir, else
    --state-dir's glossaries (`app.Settings`); None for a temporary
    folder."""
    return args.glossaries_dir or (args.state_dir and os.path.join(args.state_dir, "glossaries"))


def own_glossaries(args):
    """With --api-keys, what becomes of the kept glossaries
    (`glossaries_folder`) that have no owner (`glossary_store`): given to
    the key of --assign-glossaries, else shared by every key, which one
    warning line says (without --api-keys the server has one tenant, whose
    they are). The serve extra installed: `main` checks it."""
    if not args.api_keys:
        return
    from keras_transformer.serving.glossary_store import GlossaryStore

    store = GlossaryStore(glossaries_folder(args))
    named = (f"--glossaries-dir {args.glossaries_dir}" if args.glossaries_dir
             else f"--state-dir {args.state_dir}")
    if args.assign_glossaries is not None:
        count = store.assign(store.owner(args.assign_glossaries))
        print(f"Gave the {count} glossaries of {named} that had no owner to the "
              "key of --assign-glossaries", flush=True)
    elif count := store.shared():
        cli.warn(f"{count} glossaries in {named} have no owner "
                 "(kept before glossaries belonged to keys, or by a server without --api-keys): "
                 "every key lists, uses, changes and deletes them; start once with "
                 "--assign-glossaries KEY to make them that key's alone.")


def read_glossaries(parser, args, pairs, runtime_names):
    """`{name: (Glossary, source, target)}` of the `--glossary` options,
    each for a pair one of the models (`pairs`, opened with
    `runtime_names`) translates, read before the models load."""
    found = {}
    for option in args.glossary:
        name, equals, path = option.partition("=")
        name, colon, pair = name.partition(":")
        source, _, target = pair.lower().partition("-")
        if not equals or not name or not path or (colon and not (source and target)):
            parser.error(f"--glossary {option!r}: write NAME=FILE, or NAME:SOURCE-TARGET=FILE "
                         "(such as terms:de-en=terms.tsv)")
        if not colon:
            if len(pairs) != 1:
                parser.error(f"--glossary {option!r}: several models are served; give the pair, "
                             f"{name}:SOURCE-TARGET={path}")
            source, target = pairs[0]
        if name in found:
            parser.error(f"--glossary {name!r} is given twice; give each glossary a name of its "
                         "own")
        if (source, target) not in pairs:
            raise ValueError(f"--glossary {name}: no model translates {source} to {target} "
                             f"(the models translate {', '.join(f'{a}-{b}' for a, b in pairs)}).")
        runtime_name = runtime_names[pairs.index((source, target))]
        if runtime_name != "keras" or args.slots:
            raise ValueError(f"--glossary {name}: the {source}-{target} model "
                             + (f"has the {runtime_name} runtime, which runs its own search"
                                if runtime_name != "keras" else "searches slots (--slots)")
                             + "; glossaries are obeyed by the keras runtime's batches.")
        found[name] = (Glossary.read(path, source, target), source, target)
    return found


def server_config(args, models, glossaries=None):
    """The uvicorn configuration of the application serving `models`
    (`serving.ServedModel`s) and `glossaries` (`read_glossaries`) by the
    options `args` (the serve extra installed: `main` checks it)."""
    import uvicorn

    from keras_transformer.serving import ServedGlossary, Settings, create_app
    from keras_transformer.serving.limits import Suggestions, read_keys

    settings = Settings(
        models, api_keys=read_keys(args.api_keys) if args.api_keys else None,
        keys_required=not args.api_keys_optional,
        max_request_bytes=args.max_request_bytes, max_query_bytes=args.max_query_bytes,
        max_file_bytes=args.max_file_bytes, max_queue=args.max_queue,
        batch_tokens=args.batch_tokens, max_wait=args.max_wait_ms / 1000, workers=args.workers,
        files_dir=args.files_dir, cors_origins=args.cors_origins, char_limit=args.char_limit,
        req_limit=args.req_limit, batch_limit=args.batch_limit,
        alternatives_limit=args.alternatives_limit,
        suggestions=Suggestions(args.suggestions_db, args.max_suggestions,
                                args.char_limit if args.char_limit > 0 else 5000)
        if args.suggestions else None,
        files_translation=not args.disable_files_translation,
        metrics_token=args.metrics_auth_token, libretranslate_metrics=args.metrics,
        glossaries={name: ServedGlossary(*found) for name, found in (glossaries or {}).items()},
        state_dir=args.state_dir, glossaries_dir=args.glossaries_dir,
        max_glossaries=args.max_glossaries,
        max_glossaries_per_key=args.max_glossaries_per_key, char_quota=args.char_quota,
        max_documents=args.max_documents)
    # uvicorn's HTTP parser refuses request heads over 16 KiB with a bare 400;
    # deep-translator sends whole texts in the query string, so the parser
    # takes up to --max-query-bytes and the application answers beyond it
    # (a 414 in LibreTranslate's error body).
    return uvicorn.Config(create_app(settings), host=args.host, port=args.port,
                          access_log=args.access_log, log_level="info",
                          h11_max_incomplete_event_size=args.max_query_bytes + 65536,
                          timeout_keep_alive=args.keep_alive)
